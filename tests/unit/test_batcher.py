"""The dynamic batcher's logic over the fake backend: merge and split, priority order, queue
bound, failures and closing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future

import numpy as np
import pytest

from edge_agent.core.batcher import DynamicBatcher
from edge_agent.core.gate import ExecutionGate
from edge_agent.core.types import InferResult
from edge_agent.errors import (
    BackendError,
    ModelUnavailableError,
    QueueFullError,
    RequestTimeoutError,
)
from packager.bundle.manifest import BatchingConfig
from tests.support.eventually import eventually
from tests.support.fake_backend import FakeBackend

Held = tuple[FakeBackend, threading.Event]
BATCHED = BatchingConfig(max_batch_size=8, preferred_batch_sizes=(4, 8), instances=1,
                         max_queue_size=16)


def rows(n: int, start: float) -> np.ndarray:
    return (np.arange(n * 4, dtype=np.float32).reshape(n, 4) + start)


@pytest.fixture
def held() -> Iterator[Held]:
    hold = threading.Event()
    backend = FakeBackend(hold=hold)
    yield backend, hold
    hold.set()


def make(backend: FakeBackend, config: BatchingConfig = BATCHED,
         gate: ExecutionGate | None = None) -> DynamicBatcher:
    return DynamicBatcher(backend, model="m", version=3, config=config, gate=gate)


def busy(batcher: DynamicBatcher, backend: FakeBackend) -> Future[InferResult]:
    """Occupy the only instance with a request that runs until the test releases the hold."""
    first = batcher.submit({"x": rows(1, 1000.0)}, 1)
    backend.wait_entered()
    return first


def test_a_lone_request_runs_alone_and_gets_its_own_answer() -> None:
    backend = FakeBackend()
    batcher = make(backend)
    try:
        x = rows(3, 0.0)
        result = batcher.infer({"x": x}, 3, request_id="r1")
        assert (result.model, result.version, result.id) == ("m", 3, "r1")
        np.testing.assert_array_equal(result.outputs["y"], x * 2)
        assert [c.rows for c in backend.calls] == [3]
    finally:
        batcher.close()


def test_requests_queued_behind_a_busy_instance_merge_into_one_execution(held: Held) -> None:
    backend, hold = held
    batcher = make(backend)
    try:
        first = busy(batcher, backend)
        inputs = [rows(1, 0.0), rows(2, 100.0), rows(1, 200.0)]
        futures = [batcher.submit({"x": x}, len(x)) for x in inputs]
        hold.set()
        assert first.result(60).outputs["y"].shape == (1, 4)
        for x, future in zip(inputs, futures, strict=True):
            np.testing.assert_array_equal(future.result(60).outputs["y"], x * 2)
        assert [c.rows for c in backend.calls] == [1, 4]
    finally:
        batcher.close()


def test_a_batch_never_exceeds_the_largest_preferred_size(held: Held) -> None:
    backend, hold = held
    batcher = make(backend)
    try:
        busy(batcher, backend)
        futures = [batcher.submit({"x": rows(3, float(i))}, 3) for i in range(4)]
        hold.set()
        for future in futures:
            future.result(60)
        assert [c.rows for c in backend.calls[1:]] == [6, 6]
    finally:
        batcher.close()


def test_higher_priority_requests_run_first_and_equal_ones_in_arrival_order(held: Held) -> None:
    backend, hold = held
    unbatched = BatchingConfig(max_batch_size=0, instances=1, max_queue_size=16)
    batcher = make(backend, unbatched)
    try:
        busy(batcher, backend)
        order = [(20, 1.0), (5, 2.0), (20, 3.0), (1, 4.0), (5, 5.0)]
        futures = [batcher.submit({"x": np.full((1, 4), tag, np.float32)}, 1, priority=p)
                   for p, tag in order]
        hold.set()
        for future in futures:
            future.result(60)
        assert [c.first for c in backend.calls[1:]] == [4.0, 2.0, 5.0, 1.0, 3.0]
    finally:
        batcher.close()


def test_a_full_queue_refuses_with_queue_full(held: Held) -> None:
    backend, hold = held
    batcher = make(backend, BatchingConfig(max_batch_size=8, instances=1, max_queue_size=2))
    try:
        busy(batcher, backend)
        queued = [batcher.submit({"x": rows(1, 0.0)}, 1) for _ in range(2)]
        with pytest.raises(QueueFullError, match="queue is full"):
            batcher.submit({"x": rows(1, 0.0)}, 1)
        hold.set()
        assert all(f.result(60).outputs["y"].shape == (1, 4) for f in queued)
    finally:
        batcher.close()


def test_a_backend_failure_answers_every_request_of_the_batch(held: Held) -> None:
    backend, hold = held
    backend.fail_when = lambda inputs: inputs["x"].shape[0] > 1
    batcher = make(backend)
    try:
        first = busy(batcher, backend)
        futures = [batcher.submit({"x": rows(1, float(i))}, 1) for i in range(3)]
        hold.set()
        assert first.result(60).outputs["y"].shape == (1, 4)
        for future in futures:
            with pytest.raises(BackendError, match="failure asked for"):
                future.result(60)
        # the batcher still serves after a failed execution
        assert batcher.infer({"x": rows(1, 0.0)}, 1).outputs["y"].shape == (1, 4)
    finally:
        batcher.close()


def test_a_closed_batcher_refuses_new_requests_as_unavailable() -> None:
    batcher = make(FakeBackend())
    assert batcher.close()
    with pytest.raises(ModelUnavailableError, match="unloading"):
        batcher.submit({"x": rows(1, 0.0)}, 1)


def test_close_drains_queued_requests_before_returning(held: Held) -> None:
    backend, hold = held
    batcher = make(backend)
    first = busy(batcher, backend)
    queued = batcher.submit({"x": rows(2, 0.0)}, 2)
    closing = threading.Thread(target=batcher.close)
    closing.start()
    hold.set()
    closing.join(60)
    assert not closing.is_alive()
    assert first.done() and queued.done()
    assert queued.result().outputs["y"].shape == (2, 4)


def test_statistics_count_requests_and_executions(held: Held) -> None:
    backend, hold = held
    batcher = make(backend)
    try:
        busy(batcher, backend)
        futures = [batcher.submit({"x": rows(1, 0.0)}, 1) for _ in range(3)]
        hold.set()
        for future in futures:
            future.result(60)
        eventually(lambda: batcher.snapshot_stats().success.count == 4, timeout=60,
                   message="statistics never counted 4 requests")
        stats = batcher.snapshot_stats()
        assert stats.execution_count == 2 and stats.inference_count == 4
    finally:
        batcher.close()


def test_an_execution_holds_a_gate_slot_while_it_runs(held: Held) -> None:
    backend, hold = held
    gate = ExecutionGate(limit=2)
    batcher = make(backend, gate=gate)
    try:
        first = busy(batcher, backend)
        assert gate.running == 1
        hold.set()
        first.result(60)
        eventually(lambda: gate.running == 0, timeout=60, message="slot never given back")
    finally:
        batcher.close()


def _callers(batcher: DynamicBatcher, inputs: list[np.ndarray], answers: dict[int, object],
             wait_s: float | None = None, start: int = 0) -> list[threading.Thread]:
    """One blocked ``infer`` caller thread per input (named caller-i, i from ``start``); each
    stores its answer (or its error) in ``answers[i]``."""
    def call(i: int, x: np.ndarray) -> None:
        try:
            answers[i] = batcher.infer({"x": x}, len(x), wait_s=wait_s)
        except Exception as exc:
            answers[i] = exc

    threads = [threading.Thread(target=call, args=(i, x), name=f"caller-{i}")
               for i, x in enumerate(inputs, start)]
    for t in threads:
        t.start()
    return threads


def test_a_tiny_models_blocked_callers_run_their_batch_on_a_callers_thread() -> None:
    hold = threading.Event()
    ran_on: list[str] = []  # the thread of every execution (fail_when runs on it)

    def record_thread(_: dict[str, np.ndarray]) -> bool:
        ran_on.append(threading.current_thread().name)
        return False

    backend = FakeBackend(hold=hold, fail_when=record_thread)
    # every execution counts as a tiny model's (the front end bounds those), however long held
    batcher = DynamicBatcher(backend, model="m", version=3, config=BATCHED,
                             parallel_min_ns=1 << 62)
    answers: dict[int, object] = {}
    threads: list[threading.Thread] = []
    try:
        inputs = [rows(1, 0.0), rows(1, 100.0), rows(2, 200.0), rows(1, 300.0)]
        threads = _callers(batcher, inputs[:1], answers)  # runs inline, held
        backend.wait_entered()
        threads += _callers(batcher, inputs[1:], answers, start=1)
        eventually(lambda: batcher.snapshot_stats().pending_count == 3, timeout=60)
        hold.set()
        for t in threads:
            t.join(60)
        for i, x in enumerate(inputs):
            np.testing.assert_array_equal(answers[i].outputs["y"], x * 2)  # type: ignore[attr-defined]
        assert [c.rows for c in backend.calls] == [1, 4]  # the three queued ones: one batch
        assert all(name.startswith("caller-") for name in ran_on), ran_on
        assert batcher.inflight == 0
    finally:
        hold.set()
        for t in threads:
            t.join(60)
        batcher.close()


def test_callers_giving_up_while_queued_never_strand_the_instance() -> None:
    hold = threading.Event()
    def work(_: dict[str, np.ndarray]) -> bool:
        time.sleep(0.005)  # each execution takes a few ms: the waits below end meanwhile
        return False

    backend = FakeBackend(hold=hold, fail_when=work)
    batcher = DynamicBatcher(backend, model="m", version=3, parallel_min_ns=1 << 62,
                             config=BatchingConfig(max_batch_size=1, instances=1,
                                                   max_queue_size=64))
    answers: dict[int, object] = {}
    threads: list[threading.Thread] = []
    try:
        threads = _callers(batcher, [rows(1, 0.0)], answers)  # runs inline, held
        backend.wait_entered()
        for i in range(1, 25):  # waits ending between 10 and 240 ms
            threads += _callers(batcher, [rows(1, float(i))], answers, wait_s=0.01 * i,
                                start=i)
        eventually(lambda: batcher.snapshot_stats().pending_count >= 1, timeout=60)
        hold.set()
        for t in threads:
            t.join(60)
        assert isinstance(answers[0], InferResult)
        for i in range(1, 25):  # each answered once: its result, or its wait's end
            assert isinstance(answers[i], InferResult | RequestTimeoutError), answers[i]
        # whatever the races' outcomes, the instance came back: a new request runs
        x = rows(1, 500.0)
        np.testing.assert_array_equal(batcher.infer({"x": x}, 1, wait_s=60).outputs["y"], x * 2)
        eventually(lambda: batcher.inflight == 0, timeout=60)
    finally:
        hold.set()
        for t in threads:
            t.join(60)
        batcher.close()
