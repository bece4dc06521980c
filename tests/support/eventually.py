"""The one way a test waits for something: :func:`eventually` polls a condition until it holds.

Deadlines are generous (a loaded CI machine may be slow); a wait never asserts on how long it
took, only that the condition came true before the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator
from typing import TypeVar, cast

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 120.0


def _attempts(predicate: Callable[[], T], timeout: float,
              message: str | Callable[[], str]) -> Generator[None, None, T]:
    """Call ``predicate`` once per step until it is truthy (the generator's return value);
    AssertionError once ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"{text} (after {timeout:g} s; last value: {value!r})")
        yield


def eventually(predicate: Callable[[], T], *, timeout: float = DEFAULT_TIMEOUT_S,
               interval: float = 0.05,
               message: str | Callable[[], str] = "condition never held") -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a truthy value, and return
    that value. After ``timeout`` seconds raise AssertionError with ``message`` (a string, or a
    callable evaluated then, e.g. to include a process's output) and the last value seen.

    An exception raised by ``predicate`` propagates at once (a wait is not a retry loop).
    """
    steps = _attempts(predicate, timeout, message)
    try:
        while True:
            next(steps)
            time.sleep(interval)
    except StopIteration as done:
        return cast(T, done.value)  # the generator's return value


async def eventually_async(predicate: Callable[[], T], *, timeout: float = DEFAULT_TIMEOUT_S,
                           interval: float = 0.05,
                           message: str | Callable[[], str] = "condition never held",
                           sleep: Callable[[float], Awaitable[object]] | None = None) -> T:
    """:func:`eventually` for asyncio tests: awaits ``sleep(interval)`` between calls
    (``asyncio.sleep`` unless given, e.g. a Textual pilot's ``pause``)."""
    import asyncio

    pause = sleep or asyncio.sleep
    steps = _attempts(predicate, timeout, message)
    try:
        while True:
            next(steps)
            await pause(interval)
    except StopIteration as done:
        return cast(T, done.value)  # the generator's return value
