"""Serving capacity that abusive callers cannot take: admission of unary calls, and a budget
for the bytes of responses in flight.

:class:`AdmissionPool` is the inference server's handler pool. It admits at most ``limit``
unary calls (queued or running), shared fairly between connections, and sheds calls whose
deadline is too short to be served; a call not admitted is answered at once without a
thread. Streams and health run on pools of their own
(:func:`~edge_agent.grpc_internals.on_pool`), so neither counts here and neither can starve
the other. The pools are LeanPool instances: fixed threads on one queue that hand gRPC a
minimal future (no Future, condition or semaphore per call) when
:mod:`~edge_agent.grpc_internals` found that gRPC allows it.
:class:`ResponseBudget` bounds the bytes of encoded responses that are waiting to be sent,
whatever the callers ask for.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from edge_agent import grpc_internals
from edge_agent.errors import QueueFullError
from edge_agent.logthrottle import LogThrottle

log = logging.getLogger(__name__)
_throttle = LogThrottle(log)
_local = threading.local()


BUSY = "busy"
CLOSING = "closing"
LATE = "late"
SHARE = "share"

REFUSED = ("the agent is at its limit of concurrent calls (4 per handler thread, "
           "grpc.workers); retry shortly")
CLOSING_MESSAGE = "the agent is shutting down (draining in-flight requests); retry shortly"
LATE_MESSAGE = ("the call's deadline leaves less time than the agent takes to serve a call "
                "now (or than grpc.deadline_floor_ms); not run: send a longer deadline")
SHARE_MESSAGE = ("this connection already holds its share of the agent's concurrent calls "
                 "(4 per handler thread, grpc.workers, shared between the connections with "
                 "calls in flight, at least 1 per 2 handler threads each while the agent has "
                 "room); retry shortly, or open another connection")
_ANSWERS = {
    BUSY: (grpc.StatusCode.RESOURCE_EXHAUSTED, REFUSED),
    CLOSING: (grpc.StatusCode.UNAVAILABLE, CLOSING_MESSAGE),
    LATE: (grpc.StatusCode.DEADLINE_EXCEEDED, LATE_MESSAGE),
    SHARE: (grpc.StatusCode.RESOURCE_EXHAUSTED, SHARE_MESSAGE),
}


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
    gate = getattr(_local, "gate", None)
    if gate is not None:
        _local.gate = None
        gate.leave()


_GATED = "edge_receive_gated"


class ReceiveGate:
    """At most ``slots`` calls of ``methods`` receiving their request message at once.

    gRPC's sync server asks for a unary call's message when a handler thread takes the call
    up, and the message then comes in whole (up to ``[grpc] max_message_bytes``) before the
    deserializer can look at its size; so a thread takes a slot before asking (waiting for
    one when all are taken) and gives it back once the message is in hand
    (:func:`request_arrived`) or the call ended. HTTP/2 flow control leaves the messages of
    calls waiting here with their senders
    (:data:`~edge_agent.frontends.grpc.received.RECEIVE_WINDOW`). A slot is held at most
    ``[grpc] request_arrival_s`` (:class:`ReceiveDeadline` cancels a call whose message does
    not arrive in that time).
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = threading.Semaphore(slots)

    @staticmethod
    def gated(behavior: Callable[..., Any]) -> Callable[..., Any]:
        """Mark a unary handler ``behavior`` as one whose calls take a slot."""
        setattr(behavior, _GATED, True)
        return behavior

    def enter(self, args: tuple[Any, ...]) -> bool:
        """Take a slot (waiting for one) if the call whose pool arguments are ``args`` has a
        gated behavior."""
        if not getattr(grpc_internals.call_behavior(args), _GATED, False):
            return False
        self._free.acquire()
        return True

    def try_enter(self) -> bool:
        """Take a slot if one is free now (the inference lane: it never waits)."""
        return self._free.acquire(blocking=False)

    def leave(self) -> None:
        """Give a slot back."""
        self._free.release()


class ReceiveDeadline:
    """Cancels calls whose request has not arrived ``timeout_s`` after a handler thread began
    to wait for it (a caller that opens calls and never sends would hold the threads)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._waiting: dict[object, tuple[float, Any]] = {}  # thread or call -> (deadline, event)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.cancelled = 0

    def waiting(self, event: Any) -> None:
        """The current thread starts waiting for ``event``'s request."""
        self.waiting_for(threading.get_ident(), event)

    def waiting_for(self, key: object, event: Any) -> None:
        """``event``'s request is awaited on behalf of ``key`` (a thread, or a call the
        inference lane receives)."""
        deadline = time.monotonic() + self.timeout_s
        with self._lock:
            self._waiting[key] = (deadline, event)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="grpc-receive-watch",
                                                daemon=True)
                self._thread.start()

    def arrived(self) -> None:
        """The current thread's request arrived (or its call ended)."""
        self.arrived_for(threading.get_ident())

    def arrived_for(self, key: object) -> None:
        """The request awaited for ``key`` arrived (or its call ended)."""
        with self._lock:
            self._waiting.pop(key, None)

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
                                  grpc_internals.event_method(event))
                grpc_internals.cancel(event)

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()


_DONE_LOCK = threading.Lock()  # held for a few instructions: a call's callbacks and end


class _Call:
    """One submitted call, and the part of a Future gRPC's server uses (a done callback)."""

    __slots__ = ("args", "callbacks", "connection", "ended", "fn", "kwargs", "t0")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.callbacks: list[Callable[[Any], object]] | None = None
        self.ended = False
        self.connection: bytes = b""  # AdmissionPool: whose share it holds
        self.t0 = 0.0  # AdmissionPool: when it was admitted

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call ``fn(self)`` when the call has run (at once if it has)."""
        with _DONE_LOCK:
            if not self.ended:
                if self.callbacks is None:
                    self.callbacks = [fn]
                else:
                    self.callbacks.append(fn)
                return
        fn(self)

    def done(self) -> bool:
        """True once the call has run."""
        return self.ended

    def cancel(self) -> bool:
        """Calls are not cancelled once submitted (gRPC cancels the RPC instead)."""
        return False

    def end(self) -> None:
        with _DONE_LOCK:
            self.ended = True
            callbacks, self.callbacks = self.callbacks, None
        for fn in callbacks or ():
            try:
                fn(self)
            except Exception:
                log.exception("a handler pool's done callback failed")


class _FutureCall(futures.Future[None]):
    """One submitted call as a full Future (when gRPC needs more of it than :class:`_Call`
    provides: hook ``lean_future`` of :mod:`~edge_agent.grpc_internals`)."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.connection = b""
        self.t0 = 0.0

    def end(self) -> None:
        self.set_result(None)


def _no_work() -> None:
    """What a lease runs until it is given work (never run: a lease that gets none is ended)."""


class LeanPool(futures.ThreadPoolExecutor):
    """A fixed set of handler threads fed by one queue.

    ``submit`` returns a :class:`_Call`, not a Future: gRPC's server only adds a done callback
    to what its pool returns, and a Future costs a condition, a semaphore and their Python-level
    locking per call (measured as a visible share of the server's CPU per request); a full
    Future when the self-test found otherwise. It is a ThreadPoolExecutor only in type (gRPC
    runs a handler on its own pool only if that is one: hook ``thread_pool``).
    """

    def __init__(self, workers: int, *, thread_name_prefix: str) -> None:
        super().__init__(max_workers=workers, thread_name_prefix=thread_name_prefix)
        self.workers = workers
        self.name = thread_name_prefix
        self._new_call: type[_Call] | type[_FutureCall] = (
            _Call if grpc_internals.hooks().lean_future else _FutureCall)
        self._tasks: queue.SimpleQueue[_Call | _FutureCall | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        call = self._new_call(fn, args, kwargs)
        self._put(call)
        return call

    def _put(self, call: _Call | _FutureCall) -> None:
        if self._closed:
            raise RuntimeError("cannot schedule new calls after shutdown")
        if not self._workers:
            self._start_workers()
        self._tasks.put(call)

    def _start_workers(self) -> None:
        with self._start_lock:
            if self._workers or self._closed:
                return
            for i in range(self.workers):
                t = threading.Thread(target=self._work, name=f"{self.name}_{i}",
                                     daemon=True)
                t.start()
                self._workers.append(t)

    def _work(self) -> None:
        get, run = self._tasks.get, self._run
        while (call := get()) is not None:
            run(call)

    def _run(self, call: _Call | _FutureCall) -> None:
        try:
            call.fn(*call.args, **call.kwargs)
        except BaseException:  # gRPC's handlers answer their own errors: this is a bug
            log.exception("a handler pool's call failed")
        finally:
            self._ended(call)

    def _ended(self, call: _Call | _FutureCall) -> None:
        call.end()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._start_lock:
            self._closed = True
            workers = list(self._workers)
        if cancel_futures:
            while True:
                try:
                    call = self._tasks.get_nowait()
                except queue.Empty:
                    break
                if call is not None:
                    self._ended(call)
        for _ in workers:
            self._tasks.put(None)
        if wait:
            for t in workers:
                t.join()
        super().shutdown(wait=False)


class WatchedPool(LeanPool):
    """A handler pool whose calls are cancelled when their request does not arrive in time."""

    def __init__(self, workers: int, *, request_arrival_s: float,
                 thread_name_prefix: str, gate: ReceiveGate | None = None) -> None:
        super().__init__(workers, thread_name_prefix=thread_name_prefix)
        self.deadline = ReceiveDeadline(request_arrival_s)
        self.gate = gate
        self._watch = grpc_internals.hooks().rpc_event

    def _run(self, call: _Call | _FutureCall) -> None:
        event = grpc_internals.rpc_event(call.args) if self._watch else None
        if event is not None:
            if self.gate is not None and self.gate.enter(call.args):
                _local.gate = self.gate  # given back by request_arrived()
            _local.deadline = self.deadline
            self.deadline.waiting(event)
        try:
            call.fn(*call.args, **call.kwargs)
        except BaseException:  # gRPC's handlers answer their own errors: this is a bug
            log.exception("a handler pool's call failed")
        finally:
            if event is not None:  # the call may have ended without its request: what it
                request_arrived()  # still holds (its deadline watch, its gate slot) is given back
            self._ended(call)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.deadline.stop()
        super().shutdown(wait, cancel_futures=cancel_futures)


class AdmissionPool(WatchedPool):
    """A handler pool that admits at most ``limit`` calls at once (queued or running), shared
    fairly between connections, and sheds calls that cannot be served in time.

    When the call's event is at hand (hook ``rpc_event``), a call not admitted is answered at
    once by gRPC's core (:func:`~edge_agent.grpc_internals.answer`: no thread, its request
    never read), and before a call takes a slot:

    * **late**: a call whose deadline leaves less than ``deadline_floor_s``, or less than the
      recent time an admitted call took from admission to its end (a moving average), is
      answered DEADLINE_EXCEEDED (:data:`LATE`);
    * **share**: slots are shared between connections (grpc's peer string, whose port tells
      the connections of one address apart): a connection is admitted while it holds fewer
      than its share, ``limit // connections with calls in flight`` (itself included; all
      of them when alone) or, while fewer than ``limit`` calls are admitted, than
      ``limit // 8`` (so a client with a few calls in flight keeps them however many
      connections a flood opens, and a few connections cannot fill the headroom with their
      floors), even when others hold more than theirs (shares shrink as connections
      arrive), up to ``limit + limit // 4`` calls in all; so a caller on its own connection
      gets its share however many calls another connection keeps open (:data:`SHARE`,
      RESOURCE_EXHAUSTED).

    Without the event (hook missing) only ``limit`` applies, and refusals run on a small
    refusal pool whose handlers answer RESOURCE_EXHAUSTED (:func:`refused` tells them).
    """

    def __init__(self, workers: int, limit: int, *, request_arrival_s: float = 10.0,
                 deadline_floor_s: float = 0.0, thread_name_prefix: str = "grpc",
                 gate: ReceiveGate | None = None) -> None:
        super().__init__(workers, request_arrival_s=request_arrival_s,
                         thread_name_prefix=thread_name_prefix, gate=gate)
        self.limit = limit
        self.headroom = max(1, limit // 4)  # for connections under their share, beyond limit
        self.floor = max(1, limit // 8)  # no share below this while fewer than limit admitted
        self.deadline_floor_s = deadline_floor_s
        self._lock = threading.Lock()
        self._admitted = 0
        self._held: dict[bytes, int] = {}  # connection -> its calls admitted now
        self._service_s = 0.0  # moving average: admission to end of an admitted call
        self._refusals = WatchedPool(2, request_arrival_s=request_arrival_s,
                                     thread_name_prefix=f"{thread_name_prefix}-refuse")
        self.closing = False
        self.shed = 0  # calls answered DEADLINE_EXCEEDED before taking a slot
        self.over_share = 0  # calls refused for their connection's share

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
        """Calls admitted now (queued or running)."""
        return self._admitted

    @property
    def service_s(self) -> float:
        """The recent time an admitted call took from admission to its end (moving average)."""
        return self._service_s

    def held(self, connection: bytes) -> int:
        """Calls of ``connection`` (grpc's peer string) admitted now."""
        return self._held.get(connection, 0)

    def _admit(self, connection: bytes) -> str:
        """Take a slot for a call of ``connection`` ("" when taken), else why not."""
        with self._lock:
            if self.closing:
                return CLOSING
            held = self._held.get(connection, 0)
            others = len(self._held) - (held > 0)  # connections with calls in flight
            share = self.limit // (others + 1)
            if self._admitted < self.limit:  # the floor, never taken from the headroom
                share = max(share, self.floor)
            if held >= max(1, share):
                if not others:
                    return BUSY
                self.over_share += 1
                return SHARE
            if self._admitted >= self.limit + self.headroom:
                return BUSY
            self._admitted += 1
            self._held[connection] = held + 1
            return ""

    def _decide(self, event: Any) -> tuple[str, bytes]:
        """Whether the call of ``event`` (None: not at hand) is admitted ("") or why not, and
        its connection; a slot is taken when admitted."""
        if event is None:
            return self._admit(b""), b""
        left = grpc_internals.time_left(event)
        if left < self.deadline_floor_s or left < self._service_s:
            self.shed += 1
            return LATE, b""
        connection = grpc_internals.connection(event)
        return self._admit(connection), connection

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        event = grpc_internals.rpc_event(args) if self._watch else None
        why, connection = self._decide(event)
        if why:
            if event is not None:
                return self._answered(event, why, fn, args, kwargs)
            refuse = _refuse_closing if why == CLOSING else _refuse
            return self._refusals.submit(refuse, fn, *args, **kwargs)
        call = self._lease(fn, args, kwargs, connection)
        try:
            self._put(call)
        except BaseException:
            self._release(call)
            raise
        return call

    def _lease(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               connection: bytes) -> _Call | _FutureCall:
        call = self._new_call(fn, args, kwargs)
        call.connection = connection
        call.t0 = time.monotonic()
        return call

    def admit_event(self, event: Any) -> _Call | _FutureCall | None:
        """Admit a call taken up outside gRPC's handler pool (the inference lane), as
        :meth:`submit` would: its lease, to run with :meth:`run_leased` or give back with
        :meth:`end_leased`; None when not admitted (the call is answered at once)."""
        why, connection = self._decide(event)
        if why:
            code, details = _ANSWERS[why]
            grpc_internals.answer(event, code, details)
            return None
        return self._lease(_no_work, (), {}, connection)

    def run_leased(self, lease: _Call | _FutureCall, fn: Callable[[], object]) -> None:
        """Run ``fn`` on a handler thread; the lease is given back when it returns."""
        lease.fn = fn
        try:
            self._put(lease)
        except BaseException:
            self.end_leased(lease)
            raise

    def end_leased(self, lease: _Call | _FutureCall) -> None:
        """Give back the slot of a lease from :meth:`admit_event` that will not run."""
        self._ended(lease)

    def _answered(self, event: Any, why: str, fn: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> _Call | _FutureCall:
        """Answer a call that is not admitted at once, with the status ``why`` names, its
        request unread and no handler run (a cancel-with-status in gRPC's core: no thread,
        no message, nothing queued)."""
        code, details = _ANSWERS[why]
        grpc_internals.answer(event, code, details)
        call = self._new_call(fn, args, kwargs)
        call.end()
        return call

    def _release(self, call: _Call | _FutureCall) -> None:
        took = time.monotonic() - call.t0
        with self._lock:
            self._admitted -= 1
            held = self._held[call.connection] - 1
            if held:
                self._held[call.connection] = held
            else:
                del self._held[call.connection]
            self._service_s += (took - self._service_s) / 16

    def _ended(self, call: _Call | _FutureCall) -> None:
        self._release(call)
        call.end()

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
