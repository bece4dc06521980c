"""Serving capacity that abusive callers cannot take: admission of unary calls, and a budget
for the bytes of responses in flight.

:class:`AdmissionPool` is the inference server's handler pool. It admits at most ``limit``
unary calls (queued or running); a call beyond that runs on a small refusal pool whose only
job is to answer RESOURCE_EXHAUSTED at once (:func:`refused` tells the handler). Streams and
health run on pools of their own (``experimental_thread_pool``), so neither counts here and
neither can starve the other. :class:`ResponseBudget` bounds the bytes of encoded responses
that are waiting to be sent, whatever the callers ask for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

from edge_agent.errors import QueueFullError

_local = threading.local()


def refused() -> bool:
    """True inside a call that :class:`AdmissionPool` did not admit."""
    return getattr(_local, "refused", False)


class AdmissionPool(futures.ThreadPoolExecutor):
    """A thread pool that admits at most ``limit`` tasks at once (queued or running)."""

    def __init__(self, workers: int, limit: int, *, thread_name_prefix: str = "grpc") -> None:
        super().__init__(max_workers=workers, thread_name_prefix=thread_name_prefix)
        self.limit = limit
        self._lock = threading.Lock()
        self._admitted = 0
        self._refusals = futures.ThreadPoolExecutor(max_workers=2,
                                                    thread_name_prefix=f"{thread_name_prefix}-refuse")

    @property
    def admitted(self) -> int:
        """Tasks admitted now (queued or running)."""
        return self._admitted

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future:
        with self._lock:
            admit = self._admitted < self.limit
            if admit:
                self._admitted += 1
        if not admit:
            return self._refusals.submit(self._run, True, fn, args, kwargs)
        try:
            return super().submit(self._run, False, fn, args, kwargs)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        with self._lock:
            self._admitted -= 1

    def _run(self, refuse: bool, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        _local.refused = refuse
        try:
            return fn(*args, **kwargs)
        finally:
            _local.refused = False
            if not refuse:
                self._release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._refusals.shutdown(wait, cancel_futures=cancel_futures)
        super().shutdown(wait, cancel_futures=cancel_futures)


class ResponseBudget:
    """Bytes of responses in flight, at most ``max_bytes`` (thread-safe)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._used = 0

    @property
    def used(self) -> int:
        """Bytes reserved now."""
        return self._used

    def acquire(self, nbytes: int) -> None:
        """Reserve ``nbytes`` or raise :class:`QueueFullError` (RESOURCE_EXHAUSTED, retryable)."""
        with self._lock:
            if self._used + nbytes <= self.max_bytes:
                self._used += nbytes
                return
        if nbytes > self.max_bytes:
            raise QueueFullError(
                f"the response would be {nbytes} bytes, more than the agent's budget of "
                f"{self.max_bytes} bytes for responses in flight (grpc.max_response_bytes); "
                "ask for fewer rows or outputs")
        raise QueueFullError(
            f"responses in flight already hold close to {self.max_bytes} bytes "
            "(grpc.max_response_bytes); retry shortly")

    def release(self, nbytes: int) -> None:
        """Give back what :meth:`acquire` reserved."""
        with self._lock:
            self._used -= nbytes
