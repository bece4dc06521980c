"""Real MLP bundles (ONNX Runtime profile, built once per session) and a real served agent for
the fast-path tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from edge_agent.config import load_config
from edge_agent.core.dataplane import DataPlane
from tests.support.core_bundles import build, install
from tests.support.harness import running
from tests.support.model_factory import make_mlp

ORT = "x86_64-cpu-onnxruntime"


@dataclass(frozen=True)
class MlpBundles:
    """Two versions of one MLP with different weights, and their source models."""

    v1: Path
    v2: Path
    v1_onnx: Path
    v2_onnx: Path


@pytest.fixture(scope="session")
def mlp_bundles(tmp_path_factory: pytest.TempPathFactory) -> MlpBundles:
    d = tmp_path_factory.mktemp("fastpath-bundles")
    v1 = make_mlp(d / "mlp_v1.onnx", seed=1)
    v2 = make_mlp(d / "mlp_v2.onnx", seed=2)
    out = d / "out"
    return MlpBundles(v1=build(v1, out, "mlp", 1, profile=ORT),
                      v2=build(v2, out, "mlp", 2, profile=ORT), v1_onnx=v1, v2_onnx=v2)


@dataclass(frozen=True)
class Served:
    """A real agent (the harness's in-process mode: TCP on 127.0.0.1:0 and a Unix socket)
    serving mlp v1 with the response cache on."""

    tcp: str
    uds: Path
    dataplane: DataPlane


@pytest.fixture(scope="module")
def served(mlp_bundles: MlpBundles, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("served")
    state = root / "state"
    install(mlp_bundles.v1, state)
    toml = root / "agent.toml"
    toml.write_text("[grpc]\ntcp_shared_memory = true\n"  # the tests use TCP too
                    "[response_cache]\nsize_mib = 4\n[models.mlp]\nresponse_cache = true\n")
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0",
                         uds=root / "infer.sock")
    with running(config, name="fastpath-agent") as agent:
        addresses = agent.addresses
        assert addresses is not None and addresses.tcp is not None and addresses.uds is not None
        yield Served(addresses.tcp, addresses.uds, agent.dataplane)
