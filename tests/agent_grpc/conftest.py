"""Real bundles (packager.build) served by a real agent (DataPlane + gRPC) for the tests here.

Models in the served state dir:
  mlp v1           MLP, x86_64-cpu-onnxruntime   (random weights: parity and row ownership)
  mlp v2           MLP, x86_64-cpu-openvino
  squeezenet v1    light squeezenet, dynamic batch, x86_64-cpu-onnxruntime
  squeezenet_ov v1 light squeezenet, dynamic batch, x86_64-cpu-openvino
  squeeze_tinyq v1 squeezenet (ORT) with agent.toml overrides: max_queue_size 1, instances 1
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort
import pytest

from edge_agent.cli import main as agent_cli
from edge_agent.config import load_config
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.server import BoundAddresses
from packager.build import build_bundles
from tests.support.harness import running
from tests.support.model_factory import conditioned_light_model, make_mlp

ORT = "x86_64-cpu-onnxruntime"
OV = "x86_64-cpu-openvino"
MAX_MESSAGE_BYTES = 8 * 1024 * 1024

AGENT_TOML = """
[grpc]
max_message_bytes = {max_bytes}
workers = 48
repository_control = true

[models.squeeze_tinyq]
max_queue_size = 1
instances = 1
max_queue_delay_us = 20000
"""


@dataclass
class Sources:
    mlp: Path
    squeezenet: Path
    bundles: dict[str, Path]  # "NAME-VERSION-PROFILE" -> .edgepkg

    def reference(self, model: str, x: np.ndarray) -> np.ndarray:
        """ONNX Runtime on the source model (row by row for the fixed-batch squeezenet)."""
        if model.startswith("mlp"):
            return _session(self.mlp).run(None, {"input": x})[0]
        sess = _session(self.squeezenet)
        return np.concatenate([sess.run(None, {"data_0": x[i:i + 1]})[0] for i in range(len(x))])


_SESSIONS: dict[Path, ort.InferenceSession] = {}


def _session(path: Path) -> ort.InferenceSession:
    if path not in _SESSIONS:
        _SESSIONS[path] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return _SESSIONS[path]


@pytest.fixture(scope="session")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Sources:
    root = tmp_path_factory.mktemp("bundles")
    mlp = make_mlp(root / "mlp.onnx", seed=3)
    squeeze = conditioned_light_model("squeezenet", root)
    out = root / "out"
    paths = []
    paths += build_bundles(mlp, name="mlp", version=1, profiles=[ORT], out_dir=out)
    paths += build_bundles(mlp, name="mlp", version=2, profiles=[OV], out_dir=out)
    paths += build_bundles(squeeze, name="squeezenet", version=1, profiles=[ORT], out_dir=out,
                           dynamic_batch=True)
    paths += build_bundles(squeeze, name="squeeze_tinyq", version=1, profiles=[ORT],
                           out_dir=out, dynamic_batch=True)
    paths += build_bundles(squeeze, name="squeezenet_ov", version=1, profiles=[OV], out_dir=out,
                           dynamic_batch=True)
    return Sources(mlp=mlp, squeezenet=squeeze,
                   bundles={p.name.removesuffix(".edgepkg"): p for p in paths})


@dataclass
class Agent:
    addresses: BoundAddresses
    state_dir: Path

    @property
    def tcp(self) -> str:
        assert self.addresses.tcp
        return self.addresses.tcp

    @property
    def uds_target(self) -> str:
        return f"unix:{self.addresses.uds}"


@pytest.fixture(scope="session")
def agent(sources: Sources, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """A real agent in-process on 127.0.0.1:0 and a Unix socket (the harness's in-process
    mode, edge_agent.agent.serve)."""
    root = tmp_path_factory.mktemp("agent")
    state = root / "state"
    for bundle in sources.bundles.values():
        assert agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned",
                          str(bundle)]) == 0
    toml = root / "agent.toml"
    toml.write_text(AGENT_TOML.format(max_bytes=MAX_MESSAGE_BYTES))
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0",
                         uds=root / "infer.sock")
    with running(config, timeout_s=180) as served:
        assert served.addresses is not None
        yield Agent(addresses=served.addresses, state_dir=state)


@pytest.fixture(scope="session")
def uds_stub(agent: Agent) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    """Our own generated stub over the Unix socket."""
    options = [("grpc.max_send_message_length", 64 << 20),
               ("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(agent.uds_target, options=options) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture(scope="session")
def triton(agent: Agent):
    """The unmodified tritonclient.grpc client over TCP."""
    import tritonclient.grpc as tc

    client = tc.InferenceServerClient(agent.tcp)
    try:
        yield client
    finally:
        client.close()
