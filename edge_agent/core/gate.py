"""The device-wide execution gate: at most N backend executions at once, highest priority first.

Triton's rate limiter role. Every batcher's execution (in the agent's process or in a runtime
process) takes a slot before it runs on its backend and gives it back when the backend returns.
When every slot is taken, waiting executions queue by priority (1 is the highest; a smaller
number goes first) and, within one priority, in arrival order. An execution that waits for
another model (a Python model's ``ctx.infer``) gives its slot up for that wait
(:meth:`ExecutionGate.yielded`), so nested calls can never deadlock on the gate.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_PRIORITY = 10
"""The priority of a model whose settings give none (``[models.NAME] priority``): give 1-9
to rank a model above it, 11 and more to rank it below."""

MAX_PRIORITY_VALUE = 1 << 31
"""The largest priority number accepted (the lowest priority)."""


def default_limit() -> int:
    """The default number of concurrent executions: the CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class ExecutionGate:
    """A counting semaphore whose waiters are served by priority, then first come first served.

    ``limit`` 0 means :func:`default_limit`. Thread-safe. An uncontended ``acquire`` or
    ``release`` takes one lock and touches one counter.
    """

    def __init__(self, limit: int = 0) -> None:
        if limit < 0:
            raise ValueError(f"max_concurrent_executions must be >= 0 (0: the core count), "
                             f"got {limit}")
        self.limit = limit or default_limit()
        self._free = self.limit
        self._lock = threading.Lock()
        self._waiting: list[tuple[int, int, threading.Lock]] = []  # (priority, arrival, wake)
        self._arrivals = itertools.count()
        self._held = threading.local()  # the priority of the slot this thread holds, if any

    @property
    def waiting(self) -> int:
        """Executions waiting for a slot now."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Slots taken now."""
        return self.limit - self._free

    def acquire(self, priority: int) -> None:
        """Take a slot, waiting behind every waiter of a higher priority (smaller number) and
        every earlier waiter of the same priority."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                self._held.priority = priority
                return
            wake = threading.Lock()
            wake.acquire()
            heapq.heappush(self._waiting, (priority, next(self._arrivals), wake))
        wake.acquire()  # released by release(), which handed this thread its slot
        self._held.priority = priority

    def release(self) -> None:
        """Give a slot back: to the first waiter in priority order, else to the pool."""
        self._held.priority = None
        with self._lock:
            if self._waiting:
                heapq.heappop(self._waiting)[2].release()
            else:
                self._free += 1

    def holds(self) -> bool:
        """Whether the calling thread holds a slot now."""
        return getattr(self._held, "priority", None) is not None

    @contextmanager
    def slot(self, priority: int) -> Iterator[None]:
        """Hold a slot for the body."""
        self.acquire(priority)
        try:
            yield
        finally:
            self.release()

    @contextmanager
    def yielded(self) -> Iterator[None]:
        """Give up the calling thread's slot (if it holds one) while the body waits for other
        executions, and take one back afterwards at the same priority."""
        priority = getattr(self._held, "priority", None)
        if priority is None:
            yield
            return
        self.release()
        try:
            yield
        finally:
            self.acquire(priority)
