"""The device-wide execution gate: a slot limit, priority order, the reserved slot, yielding."""

from __future__ import annotations

import threading

import pytest

from edge_agent.core.gate import DEFAULT_PRIORITY, LOW_PRIORITY_NICE, ExecutionGate, nice_for
from tests.support.eventually import eventually


def waiter(gate: ExecutionGate, priority: int, order: list[int]) -> threading.Thread:
    """A thread that takes a slot at ``priority``, notes it in ``order`` and gives it back."""
    def run() -> None:
        with gate.slot(priority):
            order.append(priority)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_negative_limit_is_refused_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match="max_concurrent_executions"):
        ExecutionGate(-1)


def test_zero_means_the_core_count() -> None:
    assert ExecutionGate(0).limit >= 1


def test_slots_are_counted_and_given_back() -> None:
    gate = ExecutionGate(2)
    gate.acquire(DEFAULT_PRIORITY)
    gate.acquire(DEFAULT_PRIORITY)
    assert gate.running == 2 and gate.holds()
    gate.release()
    gate.release()
    assert gate.running == 0 and not gate.holds()


def test_waiters_are_served_by_priority_then_arrival() -> None:
    gate = ExecutionGate(1)
    order: list[int] = []
    gate.acquire(DEFAULT_PRIORITY)
    threads: list[threading.Thread] = []
    for priority in (30, 2, 30, 1):
        threads.append(waiter(gate, priority, order))
        queued = len(threads)
        eventually(lambda: gate.waiting == queued, timeout=60,  # noqa: B023  (waited on here)
                   message="the waiter never queued")
    gate.release()
    for thread in threads:
        thread.join(60)
    assert order == [1, 2, 30, 30]


def test_a_lower_priority_leaves_one_slot_free_while_a_higher_one_is_loaded() -> None:
    gate = ExecutionGate(2)
    gate.register(1)
    gate.register(20)
    order: list[int] = []
    gate.acquire(20)  # one background execution runs; the second slot is kept for priority 1
    background = waiter(gate, 20, order)
    eventually(lambda: gate.waiting == 1, timeout=60, message="background never waited")
    assert gate.running == 1
    urgent = waiter(gate, 1, order)
    urgent.join(60)
    assert order == [1]
    gate.release()
    background.join(60)
    assert order == [1, 20]


def test_unregistering_the_high_priority_frees_the_reserved_slot() -> None:
    gate = ExecutionGate(2)
    gate.register(1)
    gate.register(20)
    order: list[int] = []
    gate.acquire(20)
    background = waiter(gate, 20, order)
    eventually(lambda: gate.waiting == 1, timeout=60, message="background never waited")
    gate.unregister(1)
    background.join(60)
    assert order == [20]
    gate.release()


def test_yielded_gives_the_slot_up_for_the_wait_and_takes_it_back() -> None:
    gate = ExecutionGate(1)
    order: list[int] = []
    with gate.slot(5):
        with gate.yielded():
            assert gate.running == 0
            nested = waiter(gate, 5, order)  # a nested call can run meanwhile
            nested.join(60)
        assert gate.holds() and gate.running == 1
    assert order == [5] and gate.running == 0


def test_background_models_run_nicer_than_the_default() -> None:
    assert nice_for(DEFAULT_PRIORITY) == 0 and nice_for(1) == 0
    assert nice_for(DEFAULT_PRIORITY + 1) == LOW_PRIORITY_NICE
