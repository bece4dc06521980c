"""A real agent (the bundles of tests/agent_grpc) serving KServe v2 over gRPC *and* HTTP.

Models: mlp v1 (ONNX Runtime) and v2 (OpenVINO), squeezenet v1 (ONNX Runtime),
squeezenet_ov v1 (OpenVINO); repository control on; the response cache on for mlp.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from edge_agent.cli import main as agent_cli
from edge_agent.config import load_config
from edge_agent.server import BoundAddresses
from tests.agent_grpc.conftest import Sources, sources  # noqa: F401  (the session fixture)
from tests.support.harness import running

AGENT_TOML = """
[grpc]
repository_control = true
tcp_shared_memory = true

[http]
max_body_bytes = {max_body}
max_connections = 8
shared_memory = true
metrics_cache_s = 0  # the tests read counters right after the inferences they count

[response_cache]
size_mib = 4

[models.mlp]
response_cache = true
"""
MAX_BODY = 4 * 1024 * 1024
SERVED_MODELS = ("mlp", "squeezenet", "squeezenet_ov")


@dataclass
class HttpAgent:
    addresses: BoundAddresses
    state_dir: Path

    @property
    def http(self) -> str:
        assert self.addresses.http
        return self.addresses.http

    @property
    def grpc(self) -> str:
        assert self.addresses.tcp
        return self.addresses.tcp


@pytest.fixture(scope="session")
def http_agent(sources: Sources,  # noqa: F811  (the imported fixture)
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpAgent]:
    """A real agent in-process with gRPC on 127.0.0.1:0 and HTTP on 127.0.0.1:0."""
    root = tmp_path_factory.mktemp("http-agent")
    state = root / "state"
    for key, bundle in sources.bundles.items():
        if key.split("-")[0] in SERVED_MODELS:
            assert agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned",
                              str(bundle)]) == 0
    toml = root / "agent.toml"
    toml.write_text(AGENT_TOML.format(max_body=MAX_BODY))
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0", no_uds=True,
                         http_address="127.0.0.1:0")
    with running(config, timeout_s=180, name="http-agent-under-test") as served:
        assert served.addresses is not None
        yield HttpAgent(addresses=served.addresses, state_dir=state)


@pytest.fixture(scope="session")
def triton_http(http_agent: HttpAgent):
    """The unmodified tritonclient.http client."""
    import tritonclient.http as th

    client = th.InferenceServerClient(http_agent.http, concurrency=2)
    try:
        yield client
    finally:
        client.close()
