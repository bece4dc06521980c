"""The device-wide execution gate: at most N backend executions at once, highest priority first.

Triton's rate limiter role. Every batcher's execution (in the agent's process or in a runtime
process) takes a slot before it runs on its backend and gives it back when the backend returns.
When every slot is taken, waiting executions queue by priority (1 is the highest; a smaller
number goes first) and, within one priority, in arrival order. While models of different
priorities are loaded (batchers :meth:`~ExecutionGate.register` theirs) and the limit is above
one, executions of a lower priority than the highest loaded one leave one slot free: a flood of
background work never holds every core when the important model's request arrives (the gate
does not preempt a running execution). An execution that waits for
another model (a Python model's ``ctx.infer``) gives its slot up for that wait
(:meth:`ExecutionGate.yielded`), so nested calls can never deadlock on the gate.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

DEFAULT_PRIORITY = 10
"""The priority of a model whose settings give none (``[models.NAME] priority``): give 1-9
to rank a model above it, 11 and more to rank it below."""

LOW_PRIORITY_NICE = 10
"""The OS nice value of a background model's threads and runtime processes (see nice_for)."""


def nice_for(priority: int) -> int:
    """How much a model of ``priority`` defers to the rest for the CPU (OS nice, 0-19): a model
    ranked below the default (priority > DEFAULT_PRIORITY) runs its batcher threads and runtime
    processes at LOW_PRIORITY_NICE, so that a running background execution yields the cores to
    the others (the gate orders executions but never preempts one)."""
    return LOW_PRIORITY_NICE if priority > DEFAULT_PRIORITY else 0


def lower_thread_priority(nice: int) -> None:
    """Raise the calling thread's OS nice value to ``nice`` (Linux: per thread; no-op
    elsewhere, or where it is not allowed)."""
    if nice > 0 and hasattr(os, "setpriority"):
        with suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


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
        self._loaded: dict[int, int] = {}  # priority -> batchers registered with it
        self._best = 0  # the highest loaded priority (smallest number); 0: none loaded

    def register(self, priority: int) -> None:
        """A batcher of ``priority`` is loaded (unregister it when it closes)."""
        with self._lock:
            self._loaded[priority] = self._loaded.get(priority, 0) + 1
            self._best = min(self._loaded)

    def unregister(self, priority: int) -> None:
        """A batcher registered with ``priority`` closed."""
        with self._lock:
            left = self._loaded.get(priority, 0) - 1
            if left > 0:
                self._loaded[priority] = left
            else:
                self._loaded.pop(priority, None)
            self._best = min(self._loaded) if self._loaded else 0
            self._hand_over()

    def _reserve(self, priority: int) -> int:
        """Slots an execution of ``priority`` must leave free (lock held)."""
        return 1 if self.limit > 1 and self._best and priority > self._best else 0

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
            if self._free > self._reserve(priority) and not self._waiting:
                self._free -= 1
                self._held.priority = priority
                return
            wake = threading.Lock()
            wake.acquire()
            heapq.heappush(self._waiting, (priority, next(self._arrivals), wake))
            self._hand_over()  # a slot may be free for this one though not for those waiting
        wake.acquire()  # released by release(), which handed this thread its slot
        self._held.priority = priority

    def release(self) -> None:
        """Give a slot back: to the first waiter in priority order, else to the pool."""
        self._held.priority = None
        with self._lock:
            self._free += 1
            self._hand_over()

    def _hand_over(self) -> None:
        """Give free slots to the first waiters in priority order that may take one (lock
        held). The first waiter has the highest priority: when it may not, nobody may."""
        waiting = self._waiting
        while waiting and self._free > self._reserve(waiting[0][0]):
            self._free -= 1
            heapq.heappop(waiting)[2].release()

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
