"""The test suite's one wait, tests/support/eventually.py."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.support.eventually import eventually, eventually_async


def test_returns_the_first_truthy_value() -> None:
    count = itertools.count()
    assert eventually(lambda: (n := next(count)) >= 3 and n, interval=0.001) == 3


def test_fails_with_the_message_and_the_last_value() -> None:
    seen: list[int] = []
    with pytest.raises(AssertionError,
                       match=r"^queue never drained \(after 0.05 s; last value: 0\)$"):
        eventually(lambda: len(seen), timeout=0.05, interval=0.01,
                   message="queue never drained")


def test_a_callable_message_is_evaluated_only_on_failure() -> None:
    calls: list[str] = []

    def message() -> str:
        calls.append("built")
        return "output so far"

    assert eventually(lambda: True, message=message)
    assert calls == []
    with pytest.raises(AssertionError, match="output so far"):
        eventually(lambda: False, timeout=0.01, interval=0.005, message=message)
    assert calls == ["built"]


def test_an_exception_in_the_predicate_propagates_at_once() -> None:
    def broken() -> bool:
        raise RuntimeError("the process died")

    with pytest.raises(RuntimeError, match="the process died"):
        eventually(broken, timeout=60)


def test_the_async_form_waits_without_blocking_the_loop() -> None:
    async def main() -> str:
        box: list[str] = []
        asyncio.get_running_loop().call_later(0.02, box.append, "done")
        return await eventually_async(lambda: box[0] if box else "", timeout=60, interval=0.005)

    assert asyncio.run(main()) == "done"
