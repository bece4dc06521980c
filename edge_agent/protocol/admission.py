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

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

from edge_agent.errors import QueueFullError
from edge_agent.logthrottle import LogThrottle

log = logging.getLogger(__name__)
_throttle = LogThrottle(log)
_local = threading.local()


BUSY = "busy"
CLOSING = "closing"


def refused() -> str:
    """Inside a call that :class:`AdmissionPool` did not admit: why (:data:`BUSY`, or
    :data:`CLOSING` once the server drains); "" inside an admitted call."""
    return getattr(_local, "refused", "")


def _refuse(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    # runs only on the refusal pool's own threads, whose every call is a refusal: the reason
    # is set per call there (admitted calls run on other threads and never see it)
    _local.refused = BUSY
    return fn(*args, **kwargs)


def _refuse_closing(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    _local.refused = CLOSING
    return fn(*args, **kwargs)


def request_arrived() -> None:
    """Tell the pool running this thread that the call's request is in hand (handlers call
    this first; until then the call counts as waiting for its request)."""
    deadline = getattr(_local, "deadline", None)
    if deadline is not None:
        _local.deadline = None  # told once: the pool need not tell it again
        deadline.arrived()


def _rpc_event(args: tuple[Any, ...]) -> Any:
    # gRPC's sync server submits (run, handler-in-pool, rpc_event, state, ...): the event is
    # the argument carrying the call; cancelling it is ServicerContext.cancel() before the
    # context exists
    for a in args:
        if hasattr(a, "call_details") and hasattr(a, "call"):
            return a
    return None


class ReceiveDeadline:
    """Cancels calls whose request has not arrived ``timeout_s`` after a handler thread began
    to wait for it (a caller that opens calls and never sends would hold the threads)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[float, Any]] = {}  # thread id -> (deadline, rpc event)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.cancelled = 0

    def waiting(self, event: Any) -> None:
        """The current thread starts waiting for ``event``'s request."""
        with self._lock:
            self._waiting[threading.get_ident()] = (time.monotonic() + self.timeout_s, event)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="grpc-receive-watch",
                                                daemon=True)
                self._thread.start()

    def arrived(self) -> None:
        """The current thread's request arrived (or its call ended)."""
        with self._lock:
            self._waiting.pop(threading.get_ident(), None)

    def _watch(self) -> None:
        tick = min(0.25, self.timeout_s / 4)
        while not self._stop.wait(tick):
            now = time.monotonic()
            with self._lock:
                overdue = [(k, ev) for k, (d, ev) in self._waiting.items() if d <= now]
                for k, _ in overdue:
                    del self._waiting[k]
            for _, event in overdue:
                self.cancelled += 1
                _throttle.warning("silent", "cancelled a call whose request did not arrive "
                                  "within %g s (grpc.request_arrival_s): %s", self.timeout_s,
                                  getattr(event.call_details, "method", b"?"))
                event.call.cancel()

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()


class WatchedPool(futures.ThreadPoolExecutor):
    """A handler pool whose calls are cancelled when their request does not arrive in time."""

    def __init__(self, workers: int, *, request_arrival_s: float,
                 thread_name_prefix: str) -> None:
        super().__init__(max_workers=workers, thread_name_prefix=thread_name_prefix)
        self.deadline = ReceiveDeadline(request_arrival_s)

    def _watched(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
        event = _rpc_event(args)
        if event is not None:
            _local.deadline = self.deadline
            self.deadline.waiting(event)
        try:
            return fn(*args, **kwargs)
        finally:
            if event is not None and _local.deadline is not None:  # no request_arrived()
                _local.deadline = None
                self.deadline.arrived()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        return super().submit(self._watched, fn, args, kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.deadline.stop()
        super().shutdown(wait, cancel_futures=cancel_futures)


class AdmissionPool(WatchedPool):
    """A thread pool that admits at most ``limit`` tasks at once (queued or running)."""

    def __init__(self, workers: int, limit: int, *, request_arrival_s: float = 10.0,
                 thread_name_prefix: str = "grpc") -> None:
        super().__init__(workers, request_arrival_s=request_arrival_s,
                         thread_name_prefix=thread_name_prefix)
        self.limit = limit
        self._lock = threading.Lock()
        self._admitted = 0
        self._refusals = WatchedPool(2, request_arrival_s=request_arrival_s,
                                     thread_name_prefix=f"{thread_name_prefix}-refuse")
        self.closing = False

    def close(self) -> None:
        """Admit no more calls: from now on they are refused as :data:`CLOSING` (the server
        drains; clients retry elsewhere or later) while admitted ones finish."""
        self.closing = True

    def drain(self, timeout_s: float) -> bool:
        """Wait until no admitted call is left (True), or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while self._admitted > 0:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    @property
    def admitted(self) -> int:
        """Tasks admitted now (queued or running)."""
        return self._admitted

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        with self._lock:
            admit = self._admitted < self.limit and not self.closing
            if admit:
                self._admitted += 1
        if not admit:
            return self._refusals.submit(_refuse_closing if self.closing else _refuse, fn,
                                         *args, **kwargs)
        try:
            return super().submit(self._admitted_run, fn, *args, **kwargs)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        with self._lock:
            self._admitted -= 1

    def _admitted_run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
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
