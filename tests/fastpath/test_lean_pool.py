"""The lean handler pool (what gRPC's server gets from it) and the lock a blocked infer()
caller waits on: real threads, no server needed for these contracts."""

from __future__ import annotations

import threading
from concurrent.futures import InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeoutError

import pytest

from edge_agent.core.batcher import _Waiter
from edge_agent.core.types import InferResult
from edge_agent.frontends.grpc.admission import AdmissionPool, refused


def test_admission_refuses_past_the_limit_and_counts_back_down() -> None:
    pool = AdmissionPool(2, 3, request_arrival_s=30.0, thread_name_prefix="t")
    gate = threading.Event()
    seen: list[tuple[str, bool]] = []
    ended: list[str] = []
    lock = threading.Lock()

    def task(name: str) -> None:
        if name != "refused":
            gate.wait(60)
        with lock:
            seen.append((name, bool(refused())))  # refused() says why: "busy"

    try:
        calls = [pool.submit(task, f"t{i}") for i in range(3)]
        assert pool.admitted == 3
        extra = pool.submit(task, "refused")  # past the limit: answered on the refusal pool
        for i, call in enumerate([*calls, extra]):
            call.add_done_callback(lambda _c, i=i: ended.append(f"c{i}"))
        deadline = threading.Event()
        while ("refused", True) not in seen and not deadline.wait(0.01):
            pass
        gate.set()
        for _ in range(6000):
            if pool.admitted == 0 and len(ended) == 4:
                break
            deadline.wait(0.01)
        assert pool.admitted == 0
        assert sorted(ended) == ["c0", "c1", "c2", "c3"]
        assert sorted(seen) == [("refused", True), ("t0", False), ("t1", False), ("t2", False)]
        late: list[object] = []
        calls[0].add_done_callback(late.append)  # after the end: called at once
        assert late == [calls[0]] and calls[0].done()
    finally:
        gate.set()
        pool.shutdown(wait=True)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(task, "late")


def test_a_waiter_takes_the_first_answer_only() -> None:
    result = InferResult(model="m", version=1, outputs={})
    waiter = _Waiter()
    waiter.set_result(result)
    with pytest.raises(InvalidStateError):
        waiter.set_exception(ValueError("second answer"))
    assert waiter.cancel() is False
    assert waiter.result(0) is result

    failed = _Waiter()
    failed.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        failed.result()


def test_a_cancelled_waiter_refuses_a_late_answer() -> None:
    waiter = _Waiter()
    with pytest.raises(FutureTimeoutError):
        waiter.result(0.01)
    assert waiter.cancel() is True
    with pytest.raises(InvalidStateError):
        waiter.set_result(InferResult(model="m", version=1, outputs={}))
