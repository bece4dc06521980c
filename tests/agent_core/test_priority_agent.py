"""Priorities end to end: a real agent (agent.toml read by load_config, KServe gRPC on
127.0.0.1, OpenVINO models in runtime processes) and the unmodified tritonclient.

The order is proven causally, never by time: the test holds the agent's only execution slot
while a low-priority request and then a high-priority one wait for it, and queues its own
marker between them in priority; when the marker gets the slot, exactly the requests that ran
before it have answers."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as tc

from edge_agent.config import DiscoveryConfig, MetricsConfig, load_config
from edge_agent.core.dataplane import DataPlane
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install, reference_outputs
from tests.support.eventually import eventually
from tests.support.harness import running
from tests.support.spin_model import spin_input

DEADLINE_S = 120.0


@pytest.fixture
def agent(bundles: Bundles, tmp_path: Path) -> Iterator[tuple[str, DataPlane]]:
    state = tmp_path / "state"
    install(bundles.spin, state)
    install(bundles.mlp_v1, state)
    toml = tmp_path / "agent.toml"
    toml.write_text('[agent]\nmax_concurrent_executions = 1\n'
                    '[models.spin]\npriority = 20\nisolation = "process"\n'
                    '[models.mlp]\nisolation = "process"\n')
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0", no_uds=True)
    quiet = dataclasses.replace(config, discovery=DiscoveryConfig(enabled=False),
                                metrics=MetricsConfig(enabled=False))
    with running(quiet, timeout_s=DEADLINE_S, name="priority-agent") as served:
        yield served.grpc, served.dataplane


def test_a_later_high_priority_request_runs_before_a_waiting_low_priority_one(
        agent: tuple[str, DataPlane], bundles: Bundles) -> None:
    address, plane = agent
    gate = plane.gate
    assert gate.limit == 1  # [agent] max_concurrent_executions
    assert plane.repository.resolve("spin").batcher.priority == 20
    spin_backend = plane.repository.resolve("spin").batcher.backend
    mlp_backend = plane.repository.resolve("mlp").batcher.backend
    # a background model's runtime processes defer to the rest for the CPU
    assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in spin_backend.pids} == {10}
    assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in mlp_backend.pids} == {0}
    client = tc.InferenceServerClient(address)
    x = np.random.default_rng(5).standard_normal((1, 64)).astype(np.float32)

    def infer(model: str, data: np.ndarray, priority: int = 0) -> np.ndarray:
        inp = tc.InferInput("input", list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        result = client.infer(model, [inp], priority=priority, client_timeout=DEADLINE_S)
        return result.as_numpy("probs")

    marker_has_slot, marker_done = threading.Event(), threading.Event()

    def marker() -> None:  # waits between the two in priority, then holds the slot
        with gate.slot(5):
            marker_has_slot.set()
            assert marker_done.wait(DEADLINE_S)

    with ThreadPoolExecutor(3) as pool:
        gate.acquire(1)  # the test holds the device's only execution slot
        try:
            low = pool.submit(infer, "spin", spin_input())  # priority 20 from agent.toml
            eventually(lambda: gate.waiting == 1, timeout=DEADLINE_S,
                       message="timed out waiting for the spin execution to wait")
            high = pool.submit(infer, "mlp", x, 2)  # the request's own priority: 2
            eventually(lambda: gate.waiting == 2, timeout=DEADLINE_S,
                       message="timed out waiting for the mlp execution to wait")
            pool.submit(marker)
            eventually(lambda: gate.waiting == 3, timeout=DEADLINE_S,
                       message="timed out waiting for the marker to wait")
        finally:
            gate.release()
        try:
            assert marker_has_slot.wait(DEADLINE_S)
            # the marker (priority 5) runs after every higher priority and before any lower:
            # mlp (2) has run and answered; spin (20), sent first, is still waiting
            np.testing.assert_allclose(high.result(DEADLINE_S),
                                       reference_outputs(bundles.mlp_v1_onnx, {"input": x})
                                       ["probs"], rtol=1e-4, atol=1e-5)
            assert not low.done()
        finally:
            marker_done.set()
        assert low.result(DEADLINE_S).shape == (1, 10)
    client.close()
    assert gate.running == 0 and gate.waiting == 0
