"""KServe RepositoryModelLoad/Unload with the real tritonclient against a real agent.

Off by default (UNAVAILABLE naming the setting); when on, the calls go through the model
manager (its lock, its state store): Load brings back only the active version, unsupported
parameters are refused, every call is logged with the peer, and an unload never interleaves
with a deploy."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from edge_agent.client.agent_client import AgentClient
from edge_agent.config import AgentConfig, GrpcConfig
from edge_agent.core.dataplane import DataPlane
from edge_agent.deploy.manager import ManagerSettings, ModelManager
from edge_agent.server import AgentServer
from edge_agent.state import StateStore, Step
from tests.support.bundles import Bundles
from tests.support.harness import InProcessAgent, sections, start_agent

X = np.random.default_rng(4).standard_normal((2, 64)).astype(np.float32)


def _infer(triton: tc.InferenceServerClient, version: str = "") -> str:
    inp = tc.InferInput("input", [2, 64], "FP32")
    inp.set_data_from_numpy(X)
    return triton.infer("mlp", [inp], model_version=version).get_response().model_version


def _agent(tmp_path: Path, bundles: Bundles, *, control: bool) -> InProcessAgent:
    options = sections("control", bundles.public_key)
    return start_agent(tmp_path / "state", options, repository_control=control)


def test_model_control_is_off_by_default(tmp_path: Path, bundles: Bundles) -> None:
    agent = _agent(tmp_path, bundles, control=False)
    try:
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[1]).ok
        with tc.InferenceServerClient(agent.grpc) as triton:
            for call in (triton.unload_model, triton.load_model):
                with pytest.raises(InferenceServerException) as err:
                    call("mlp")
                assert err.value.status() == "StatusCode.UNAVAILABLE"
                assert "repository_control = true" in err.value.message()
            assert triton.is_model_ready("mlp") and _infer(triton) == "1"
    finally:
        agent.stop()


def test_load_brings_back_only_the_active_version(tmp_path: Path, bundles: Bundles,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="edge_agent.frontends.grpc.servicer")
    agent = _agent(tmp_path, bundles, control=True)
    try:
        with AgentClient(agent.management, token=agent.token) as client:
            for v in (1, 2, 3):
                assert client.deploy(bundles.mlp[v]).ok
            assert client.rollback("mlp", 1).ok  # 2 and 3 stay on disk, rolled back from
        with tc.InferenceServerClient(agent.grpc) as triton:
            triton.unload_model("mlp")
            assert not triton.is_model_ready("mlp")
            triton.load_model("mlp")
            assert triton.is_model_ready("mlp") and _infer(triton) == "1"
            for v in ("2", "3"):
                assert not triton.is_model_ready("mlp", v)
                with pytest.raises(InferenceServerException):
                    _infer(triton, v)
            index = {(m.name, m.version, m.state)
                     for m in triton.get_model_repository_index().models}
            assert index == {("mlp", "1", "READY"), ("mlp", "2", "UNAVAILABLE"),
                             ("mlp", "3", "UNAVAILABLE")}  # on disk, not served
            with pytest.raises(InferenceServerException) as err:
                triton.load_model("mlp", config='{"backend": "onnxruntime"}')
            assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert "'config'" in err.value.message()
            with pytest.raises(InferenceServerException) as err:
                triton.load_model("mlp", config="{}", files={"file:1/model.onnx": b"\0"})
            assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert "'file:1/model.onnx'" in err.value.message()
            with pytest.raises(InferenceServerException) as err:
                triton.load_model("absent")
            assert err.value.status() == "StatusCode.NOT_FOUND"
            assert _infer(triton) == "1"
        with AgentClient(agent.management, token=agent.token) as client:
            stored = {v.version: v.stored_state for v in client.models("mlp")}
        assert stored[1] == "ready"
    finally:
        agent.stop()
    lines = [r.getMessage() for r in caplog.records if "RepositoryModel" in r.getMessage()]
    assert any(line.startswith("RepositoryModelUnload of 'mlp' from ipv4:127.0.0.1:")
               for line in lines), lines
    assert any(line.startswith("RepositoryModelLoad of 'mlp' from ipv4:127.0.0.1:")
               and "version 1 loaded" in line for line in lines), lines
    assert any("refused" in line and "'config'" in line for line in lines), lines


class _Gate:
    """A step hook that holds a deployment at one step until released."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, deployment_id: int, step: Step) -> None:
        if step is self.step:
            self.reached.set()
            assert self.release.wait(120), "the test never released the gate"


@pytest.fixture
def gated(tmp_path: Path, bundles: Bundles) -> Iterator[tuple[ModelManager, _Gate, str]]:
    """A manager held at LOADED of each deploy, behind a real inference server with model
    control on."""
    state = tmp_path / "state"
    gate = _Gate(Step.LOADED)
    dataplane = DataPlane(state, autoload=False)
    store = StateStore.open(state)
    manager = ModelManager(dataplane, store, ManagerSettings(
        trusted_keys=(bundles.public_key,), watch_window_s=0.0), step_hooks=[gate])
    manager.start()
    config = AgentConfig(state_dir=state, grpc=GrpcConfig(
        address="127.0.0.1:0", uds_enabled=False, repository_control=True))
    server = AgentServer(dataplane, config, model_control=manager)
    addresses = server.start()
    try:
        assert addresses.tcp is not None
        yield manager, gate, addresses.tcp
    finally:
        gate.release.set()
        server.stop(1)
        manager.close()
        dataplane.close()
        store.close()


def test_kserve_unload_racing_a_deploy_is_refused_and_changes_nothing(
        gated: tuple[ModelManager, _Gate, str], bundles: Bundles) -> None:
    manager, gate, address = gated
    gate.release.set()
    assert manager.deploy(bundles.mlp[1]).ok
    gate.release.clear()
    gate.reached.clear()
    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(out=manager.deploy(bundles.mlp[2])))
    worker.start()
    try:
        assert gate.reached.wait(120), "the deploy never reached the gate"
        with tc.InferenceServerClient(address) as triton:
            with pytest.raises(InferenceServerException) as err:
                triton.unload_model("mlp")
            assert err.value.status() == "StatusCode.FAILED_PRECONDITION"
            assert "in progress" in err.value.message()
            with pytest.raises(InferenceServerException) as err:
                triton.load_model("mlp")
            assert "in progress" in err.value.message()
            assert _infer(triton) == "1"  # the deploy has not switched yet
            gate.release.set()
            worker.join(120)
            outcome = result["out"]
            assert outcome.ok, outcome  # type: ignore[attr-defined]
            assert _infer(triton) == "2"
            assert manager.store.active_version("mlp") == 2
            triton.unload_model("mlp")  # no deploy running: allowed
            assert not triton.is_model_ready("mlp")
            triton.load_model("mlp")
            assert _infer(triton) == "2"
    finally:
        gate.release.set()
        worker.join(120)


def test_activate_force_after_a_kserve_unload_loads_the_active_version(
        gated: tuple[ModelManager, _Gate, str], bundles: Bundles) -> None:
    manager, gate, address = gated
    gate.release.set()
    assert manager.deploy(bundles.mlp[1]).ok
    with tc.InferenceServerClient(address) as triton:
        triton.unload_model("mlp")
        assert not triton.is_model_ready("mlp")
        outcome = manager.activate("mlp", 1, force=True)  # nothing in memory to reload
        assert outcome.ok, outcome.message
        assert _infer(triton) == "1"
        assert manager.deploy(bundles.mlp[2]).ok and _infer(triton) == "2"
