"""Priorities: the device-wide execution gate and the batcher's queue order (issue 13).

Every test asserts on the order executions ran in, never on time: the gate is held by the
test, requests queue up behind it, and the test releases it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.backends import BackendOptions, load_backend
from edge_agent.config import load_config
from edge_agent.core.batcher import DynamicBatcher
from edge_agent.core.gate import DEFAULT_PRIORITY, ExecutionGate
from edge_agent.core.repository import load_manifest
from edge_agent.errors import ConfigError, InvalidInputError
from edge_agent.frontends.grpc.converters import to_infer_request
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from packager.bundle.manifest import BatchingConfig
from tests.agent_core.conftest import Bundles
from tests.agent_core.test_batching import GatedBackend
from tests.support.core_bundles import install, reference_outputs
from tests.support.eventually import eventually

DEADLINE_S = 60.0


class RecordingGate(ExecutionGate):
    """The real gate, keeping the priority of every slot it hands out, in order."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.order: list[int] = []

    def acquire(self, priority: int) -> None:
        super().acquire(priority)
        self.order.append(priority)


@pytest.fixture(scope="module")
def mlp(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    d: Path = install(bundles.mlp_v1, tmp_path_factory.mktemp("priority"))
    backend = load_backend(d, load_manifest(d), BackendOptions(instances=1),
                           preferred="onnxruntime")
    try:
        yield backend, bundles.mlp_v1_onnx
    finally:
        backend.close()


def test_gate_serves_the_highest_priority_first_and_fifo_within_a_priority() -> None:
    gate = ExecutionGate(1)
    gate.acquire(1)  # the test holds the only slot
    ran: list[str] = []

    def execution(name: str, priority: int) -> None:
        with gate.slot(priority):
            ran.append(name)

    threads = []
    for name, priority in [("low-a", 20), ("high-a", 1), ("low-b", 20), ("mid", 5),
                           ("high-b", 1)]:
        t = threading.Thread(target=execution, args=(name, priority))
        t.start()
        threads.append(t)
        count = len(threads)
        eventually(lambda: gate.waiting == count, timeout=DEADLINE_S,  # noqa: B023
                   message=f"timed out waiting for {name} to wait")
    gate.release()
    for t in threads:
        t.join(DEADLINE_S)
    assert ran == ["high-a", "high-b", "mid", "low-a", "low-b"]
    assert gate.running == 0 and gate.waiting == 0


def test_gate_limits_concurrency_and_an_execution_waiting_on_another_gives_its_slot_up(
        ) -> None:
    gate = ExecutionGate(1)
    inner_ran = threading.Event()
    with gate.slot(3):
        assert gate.holds() and gate.running == 1
        other = threading.Thread(target=lambda: (gate.acquire(3), inner_ran.set(),
                                                 gate.release()))
        other.start()
        eventually(lambda: gate.waiting == 1, timeout=DEADLINE_S,
                   message="timed out waiting for the other execution to wait")
        assert not inner_ran.is_set()  # one slot: it waits while this one holds it
        with gate.yielded():  # a nested call (ctx.infer) waiting for that execution
            assert inner_ran.wait(DEADLINE_S)
        other.join(DEADLINE_S)
        assert gate.holds() and gate.running == 1  # the slot came back
    assert not gate.holds() and gate.running == 0
    with pytest.raises(ValueError, match="max_concurrent_executions"):
        ExecutionGate(-1)
    assert ExecutionGate(0).limit >= 1  # 0: the core count


def test_batcher_runs_queued_requests_of_higher_priority_first(mlp) -> None:
    backend, onnx_path = mlp
    held = GatedBackend(backend)  # the first execution holds the only instance
    config = BatchingConfig(max_batch_size=1, instances=1, max_queue_size=100)
    batcher = DynamicBatcher(held, model="mlp", version=1, config=config, priority=10)
    done: list[str] = []
    xs = {name: np.random.default_rng(i).standard_normal((1, 64)).astype(np.float32)
          for i, name in enumerate(["first", "low-a", "low-b", "high-a", "model", "high-b"])}
    try:
        futures = {"first": batcher.submit({"input": xs["first"]}, 1)}
        assert held.entered.wait(DEADLINE_S)
        for name, priority in [("low-a", 20), ("low-b", 20), ("high-a", 1), ("model", 0),
                               ("high-b", 1)]:
            f = batcher.submit({"input": xs[name]}, 1, request_id=name, priority=priority)
            f.add_done_callback(lambda f: done.append(f.result().id))
            futures[name] = f
        held.release.set()
        for name, f in futures.items():
            ref = reference_outputs(onnx_path, {"input": xs[name]})["probs"]
            np.testing.assert_allclose(f.result(DEADLINE_S).outputs["probs"], ref,
                                       rtol=1e-4, atol=1e-5)
    finally:
        assert batcher.close(DEADLINE_S)
    # priority 0 is the model's own (10): between the highs and the lows
    assert done == ["high-a", "high-b", "model", "low-a", "low-b"]


def test_executions_of_two_models_wait_at_the_gate_by_priority(mlp) -> None:
    backend, onnx_path = mlp
    gate = RecordingGate(1)
    config = BatchingConfig(max_batch_size=4, instances=1, max_queue_size=100)
    low = DynamicBatcher(backend, model="background", version=1, config=config,
                         priority=20, gate=gate)
    high = DynamicBatcher(backend, model="safety", version=1, config=config, gate=gate)
    x = np.ones((1, 64), np.float32)
    try:
        gate.acquire(99)  # the test holds the device's only slot
        low_future = low.submit({"input": x}, 1)  # a worker takes it and waits at the gate
        eventually(lambda: gate.waiting == 1, timeout=DEADLINE_S,
                   message="timed out waiting for the low-priority execution to wait")
        answers: list[np.ndarray] = []
        caller = threading.Thread(  # runs inline on its own thread, per-request priority 2
            target=lambda: answers.append(high.infer({"input": x}, 1, priority=2)
                                          .outputs["probs"]))
        caller.start()
        eventually(lambda: gate.waiting == 2, timeout=DEADLINE_S,
                   message="timed out waiting for the high-priority execution to wait")
        gate.release()
        low_out = low_future.result(DEADLINE_S).outputs["probs"]
        caller.join(DEADLINE_S)
    finally:
        assert low.close(DEADLINE_S) and high.close(DEADLINE_S)
    assert gate.order == [99, 2, 20]  # the later, higher-priority request ran first
    ref = reference_outputs(onnx_path, {"input": x})["probs"]
    np.testing.assert_allclose(low_out, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(answers[0], ref, rtol=1e-4, atol=1e-5)
    assert gate.running == 0
    assert high.priority == DEFAULT_PRIORITY


def test_config_reads_priorities_and_the_execution_limit(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text('[agent]\nmax_concurrent_executions = 3\n'
                    '[models."*"]\npriority = 12\n[models.safety]\npriority = 1\n')
    config = load_config(toml, state_dir=tmp_path)
    assert config.models.max_concurrent_executions == 3
    assert config.models.overrides["safety"].priority == 1 and config.models.defaults.priority == 12
    for bad, message in [('[models.m]\npriority = 0\n', "priority': must be between 1"),
                         ('[agent]\nmax_concurrent = 2\n', "agent.max_concurrent' is unknown"),
                         ('[agent]\nmax_concurrent_executions = -1\n', "max_concurrent")]:
        toml.write_text(bad)
        with pytest.raises(ConfigError, match=message):
            load_config(toml, state_dir=tmp_path)


def test_the_kserve_priority_parameter_reaches_the_core_request() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="input", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
    assert to_infer_request(msg)[0].priority == 0  # absent: the model's
    msg.parameters["priority"].uint64_param = 3
    assert to_infer_request(msg)[0].priority == 3
    msg.parameters["priority"].int64_param = -1
    with pytest.raises(InvalidInputError, match="'priority' must be an integer"):
        to_infer_request(msg)
    msg.parameters["priority"].string_param = "high"
    with pytest.raises(InvalidInputError, match="'priority'"):
        to_infer_request(msg)


def test_lower_priorities_leave_a_slot_free_while_a_higher_priority_model_is_loaded() -> None:
    gate = ExecutionGate(2)
    gate.register(1)  # the important model
    gate.register(20)  # the background model
    gate.acquire(20)  # one background execution runs
    second = threading.Event()
    background = threading.Thread(target=lambda: (gate.acquire(20), second.set()))
    background.start()
    eventually(lambda: gate.waiting == 1, timeout=DEADLINE_S,
               message="timed out waiting for the second background execution to wait")
    assert gate.running == 1 and not second.is_set()  # the last slot is kept for priority 1
    gate.acquire(1)  # the important model finds it free, though a waiter came first
    assert gate.running == 2
    gate.release()  # the important execution is done: its slot stays reserved
    assert gate.waiting == 1 and not second.is_set()
    gate.unregister(1)  # the important model is unloaded: nothing to keep a slot for
    assert second.wait(DEADLINE_S)
    background.join(DEADLINE_S)
    assert gate.running == 2 and gate.waiting == 0
    gate.release()
    gate.release()
    assert gate.running == 0
