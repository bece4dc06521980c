"""ModelInfer served from a completion queue of its own (``[grpc] infer_lane = "queue"``).

grpcio's sync server moves every unary call across threads twice before a handler runs: its
polling thread hands the call to a handler thread, which asks for the request and waits until
the polling thread has it (docs/performance.md, issue 29: most of the agent's CPU per small
request at 16 in flight went to those wake-ups under the GIL). The lane takes ModelInfer's
calls on a queue of their own (:func:`edge_agent.grpc_internals.attach_queue`); its one
thread admits a call, receives its request and parses it, then runs it: on a handler thread
(one hand-off), or at once on its own thread when the model answers in microseconds
(``quick``), where a hand-off would cost more than the model. Every other method stays on the
sync server.

The same protections apply as on the handler threads: admission and the per-connection shares
(:class:`~.admission.AdmissionPool`, whose slots the lane's calls take), the receive gate (a
call waits for a slot before its message is read; the lane never blocks on one), the arrival
deadline (:class:`~.admission.ReceiveDeadline`), the budgets of the request deserializer and
the handler's own checks (the same guarded behavior runs).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from edge_agent.core.api import DataPlaneAPI
from edge_agent.frontends.grpc.admission import AdmissionPool, ReceiveGate
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.received import Received
from edge_agent.grpc_internals import CoreQueue

log = logging.getLogger(__name__)

METHOD = "/inference.GRPCInferenceService/ModelInfer"
NO_MESSAGE = "ModelInfer requires exactly one request message"

MAX_TOGETHER = 64
"""At most this many quick calls run together, and the lane takes at most this many events
while a quick call waits (a stream of other events, calls refused at admission among them,
never holds it up longer)."""

Together = Callable[[list[tuple[Any, Any]]], list[Any]]
"""Runs quick calls' parsed requests together: ``[(request, context)]`` in, each call's
response or the exception its handler raised out, in order."""

_NEW = object()
_RECEIVED = 1
_CLOSED = 2
_SENT = 3


def quick_on(dataplane: DataPlaneAPI) -> Callable[[Any], bool]:
    """Which parsed requests the lane runs on its own thread: those refused without work
    (undecodable, over a budget, a version that is not a number) and those whose model would
    run them at once in microseconds (:meth:`DataPlaneAPI.runs_now`). Never a large message
    (one the receive budget charged)."""

    def quick(request: Any) -> bool:
        if isinstance(request, Received):
            return False
        if not isinstance(request, pb.ModelInferRequest):
            return True
        if not request.model_version:
            return dataplane.runs_now(request.model_name)
        if not request.model_version.isdigit():
            return True
        return dataplane.runs_now(request.model_name, int(request.model_version))

    return quick


class LaneContext:
    """What ModelInfer's handler and the serving core ask of its ``grpc.ServicerContext``
    (the peer, the metadata, the call's end and whether it is still wanted), for a lane
    call; ``abort`` records the status the lane answers with."""

    __slots__ = ("_callbacks", "_ended", "_event", "_lock", "code", "details")

    def __init__(self, event: Any) -> None:
        self._event = event
        self._callbacks: list[Callable[[], None]] = []
        self._ended = False
        self._lock = threading.Lock()
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def peer(self) -> str:
        """The caller's address, as grpc names it."""
        peer: bytes = self._event.call.peer()
        return peer.decode(errors="replace")

    def invocation_metadata(self) -> Any:
        """The call's metadata, (key, value) pairs."""
        return self._event.invocation_metadata

    def is_active(self) -> bool:
        """False once the call ended (answered, cancelled) or its deadline passed."""
        return not self._ended and time.time() < self._event.call_details.deadline

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` when the call ends; False if it has ended already."""
        with self._lock:
            if self._ended:
                return False
            self._callbacks.append(callback)
            return True

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        """End the call with ``code`` (raises, as grpc's does: a bare Exception)."""
        self.code, self.details = code, details
        raise Exception()  # what grpc's abort raises; the lane answers with the code

    def ended(self) -> None:
        """The call is over: run the callbacks (once)."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a ModelInfer call's end callback failed")


class _LaneCall:
    __slots__ = ("closed", "context", "event", "gated", "lease", "waiting")

    def __init__(self, event: Any, lease: Any) -> None:
        self.event = event
        self.lease: Any = lease  # None once given back
        self.context = LaneContext(event)
        self.closed = False
        self.gated = False
        self.waiting = False


class InferLane:
    """ModelInfer's calls, taken from ``queue`` by one thread (see the module docstring)."""

    def __init__(self, queue: CoreQueue, pool: AdmissionPool,
                 behavior: Callable[[Any, Any], Any], deserializer: Callable[[bytes], Any],
                 serializer: Callable[[Any], bytes], *, gate: ReceiveGate | None = None,
                 quick: Callable[[Any], bool] | None = None,
                 together: Together | None = None) -> None:
        self._queue = queue
        self._pool = pool
        self._behavior = behavior
        self._deserialize = deserializer
        self._serialize = serializer
        self._gate = gate
        self._quick = quick
        self._together = together
        self._waiting: collections.deque[_LaneCall] = collections.deque()
        self._ready: list[tuple[_LaneCall, Any]] = []  # quick calls taken up, to run together
        self._thread: threading.Thread | None = None
        self.served_here = 0  # calls run on the lane's own thread
        self.handed_off = 0  # calls run on a handler thread
        self.run_together = 0  # calls run on the lane's thread with others ready at once

    def start(self) -> None:
        """Take calls (after the server started)."""
        self._queue.request(_NEW)
        self._thread = threading.Thread(target=self._loop, name="grpc-infer-lane", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """After the server stopped: end the queue and the thread."""
        self._queue.shutdown()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        queue = self._queue
        ready = self._ready
        taken = 0  # events taken while quick calls wait
        while True:
            if not ready:
                taken = 0
                event = queue.poll()
            elif taken >= MAX_TOGETHER or queue.timed_out(event := queue.poll_ready()):
                event = None  # nothing else is ready now (or enough waited): run what is
            else:
                taken += 1
            ending = event is not None and queue.shut_down(event)
            try:
                if event is None or ending:  # at the end too: every call taken up answered
                    if ready:
                        self._run_ready()
                else:
                    self._on(event)
            except Exception:  # a bug: the lane must keep taking calls
                log.exception("the inference lane failed on an event")
            if ending:
                return

    def _on(self, event: Any) -> None:
        tag = event.tag
        if tag is _NEW:
            self._new(event)
            return
        kind, call = tag
        if kind == _RECEIVED:
            self._received(event, call)
        elif kind == _CLOSED:
            self._closed(call)
        # _SENT: nothing to do; the call's end comes as _CLOSED

    def _new(self, event: Any) -> None:
        if not event.success:  # the server is shutting down: ask for no more
            return
        self._queue.request(_NEW)
        lease = self._pool.admit_event(event)
        if lease is None:  # refused: answered already
            return
        call = _LaneCall(event, lease)
        try:
            self._queue.watch_close(event.call, (_CLOSED, call))
        except Exception:  # the call is already gone: its slot goes back
            self._end(call)
            raise
        if self._gate is None:
            self._receive(call)
        elif self._gate.try_enter():
            call.gated = True
            self._receive(call)
        else:  # its message stays with the sender until a slot frees
            call.waiting = True
            self._waiting.append(call)

    def _receive(self, call: _LaneCall) -> None:
        self._pool.deadline.waiting_for(call, call.event)
        self._queue.receive(call.event.call, (_RECEIVED, call))

    def _slot_freed(self) -> None:
        assert self._gate is not None
        while self._waiting:
            call = self._waiting.popleft()
            call.waiting = False
            if call.closed:
                continue
            call.gated = True
            self._receive(call)
            return
        self._gate.leave()

    def _received(self, event: Any, call: _LaneCall) -> None:
        self._pool.deadline.arrived_for(call)
        if call.gated:
            call.gated = False
            self._slot_freed()
        data = self._queue.message(event)
        if data is None:  # cancelled, or closed without a message
            if not call.closed:
                self._queue.answer(call.event.call, None, grpc.StatusCode.UNIMPLEMENTED,
                                   NO_MESSAGE, (_SENT, call))
            self._end(call)
            return
        try:  # parsed here, on arrival: the receive budget charges a large message now, so
            # messages received cannot pile up uncharged behind busy handler threads
            request = self._deserialize(data)
            here = self._quick is not None and self._quick(request)
        except Exception:  # a bug in a deserializer or the hint: answered, not left open
            self._failed(call)
            self._end(call)
            return
        if here and self._together is not None and type(request) is pb.ModelInferRequest:
            self._ready.append((call, request))  # run with the others ready now
        elif here:
            self.served_here += 1
            try:
                self._run(call, request)
            finally:
                self._end(call)
        else:
            self.handed_off += 1
            lease, call.lease = call.lease, None  # the pool gives it back when run
            self._pool.run_leased(lease, lambda: self._run(call, request))

    def _failed(self, call: _LaneCall) -> None:
        log.exception("ModelInfer's request could not be taken up")
        self._queue.answer(call.event.call, None, grpc.StatusCode.INTERNAL,
                           "the agent could not take the request up", (_SENT, call))

    def _run_ready(self) -> None:
        """Run the quick calls taken up since the queue was last empty, together."""
        ready = self._ready.copy()  # the loop keeps its reference to self._ready
        self._ready.clear()
        self.served_here += len(ready)
        try:
            if len(ready) == 1:
                self._run(*ready[0])
                return
            assert self._together is not None  # only then are calls made ready
            self.run_together += len(ready)
            try:
                outcomes = self._together([(request, call.context) for call, request in ready])
            except Exception:  # a bug: every call answered, none left open
                log.exception("ModelInfer failed")
                outcomes = [Exception("the calls taken up together failed")] * len(ready)
            for (call, _), outcome in zip(ready, outcomes, strict=True):
                try:  # one call's failure leaves the others answered
                    self._answer(call, outcome)
                except Exception:
                    log.exception("a ModelInfer call could not be answered")
        finally:
            for call, _ in ready:
                self._end(call)

    def _run(self, call: _LaneCall, request: Any) -> None:
        # the exception is answered inside its except block, never kept in a local: its
        # traceback holds this frame and its callers', the request's bytes among them
        try:
            outcome = self._behavior(request, call.context)
        except Exception as exc:
            self._answer(call, exc)
            return
        self._answer(call, outcome)

    def _answer(self, call: _LaneCall, outcome: Any) -> None:
        """Answer ``call`` with ``outcome``: its response, or the exception its handler
        raised (its status the one the handler aborted with)."""
        context = call.context
        data: bytes | None = None
        if isinstance(outcome, Exception):
            code, details = self._status(context, outcome)
        else:
            try:
                data = self._serialize(outcome)
                code, details = grpc.StatusCode.OK, ""
            except Exception as exc:
                code, details = self._status(context, exc)
        if code is not grpc.StatusCode.OK and time.time() >= call.event.call_details.deadline:
            # past its deadline the call is the core's to end, as DEADLINE_EXCEEDED (what the
            # handler threads' callers see: grpc drops a status sent after it), whatever the
            # handler made of its deadline passing
            data, code, details = None, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
        self._queue.answer(call.event.call, data, code, details, (_SENT, call))

    @staticmethod
    def _status(context: LaneContext, exc: Exception) -> tuple[grpc.StatusCode, str]:
        """The status a call whose handler raised ``exc`` ends with."""
        if context.code is not None:
            return context.code, context.details
        # what grpc answers for an error the handler did not map
        log.error("ModelInfer failed", exc_info=exc)
        return grpc.StatusCode.UNKNOWN, f"Exception calling application: {exc}"

    def _closed(self, call: _LaneCall) -> None:
        call.closed = True
        call.context.ended()
        if call.waiting:  # never received: its slot goes back now
            call.waiting = False
            self._waiting.remove(call)
            self._end(call)

    def _end(self, call: _LaneCall) -> None:
        lease, call.lease = call.lease, None
        if lease is not None:
            self._pool.end_leased(lease)
