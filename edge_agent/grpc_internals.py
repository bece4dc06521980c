"""Every grpcio behaviour the agent's abuse protections rely on beyond grpcio's public API, in
one place, each checked at start by :func:`hooks` (a self-test on a throwaway server).

The hooks, with the grpcio source they rely on (``grpc/_server.py``, the same file in grpcio
1.85.1 and 1.85.3, the newest release checked; line numbers of that file):

``thread_pool``
    A handler function's ``experimental_thread_pool`` attribute: the sync server runs the call
    on that pool instead of its own when the attribute is a ``futures.ThreadPoolExecutor``
    (``_select_thread_pool_for_behavior``, lines 874-882). Gives ModelStreamInfer and the
    health service pools of their own, outside unary admission (:func:`on_pool`).
``non_blocking``
    A handler function's ``experimental_non_blocking`` attribute: a response-streaming call is
    given a ``send_response_callback`` (third positional argument, ``_call_behavior`` lines
    603-606) and its handler returns at once (``_stream_response_in_pool``, lines 826-837).
    An open ModelStreamInfer stream and a management call refused for its token then hold no
    handler thread (:func:`non_blocking`).
``lean_future``
    The server uses only ``add_done_callback`` on what its pool's ``submit`` returns
    (``_process_event_and_continue``, lines 1284-1288), so a handler pool may return a small
    call object instead of a ``concurrent.futures.Future``
    (:class:`~edge_agent.frontends.grpc.admission.LeanPool`; a throughput measure, not a
    protection).
``rpc_event``
    The pool's ``submit`` gets ``(context.run, handler_in_pool, rpc_event, state, ...)``
    (``_handle_unary_unary`` and its three siblings, lines 897-906, 921-930, 945-954,
    969-978): the call's event is argument :data:`EVENT_INDEX`, the handler's behavior two
    after it (:func:`call_behavior`: the receive gate knows ModelInfer's calls by it, as a
    registered method's event does not name its method); its ``call.cancel()`` ends the
    call (what ``_Context.cancel`` does, lines 386-387) and ``call_details.method`` names it.
    Used to cancel calls whose request never arrives (:func:`rpc_event`, :func:`cancel`),
    and to answer calls the inference pool sheds or refuses before any handler runs
    (:func:`answer`: the event's ``call.cancel(code, details)``, cygrpc's
    ``grpc_call_cancel_with_status``; ``call_details.deadline`` and ``call.peer()`` tell the
    pool the call's deadline and connection).

``core_queue`` (:func:`attach_queue`, :class:`CoreQueue`; not part of the self-test)
    grpc core's server, which ``grpc.server`` wraps (``_Server._cy_server``, a
    ``cygrpc.Server``; ``_Server.__init__`` and ``add_registered_method_handlers``), takes a
    second completion queue and a *registered* method before it starts; the core then hands
    that method's calls only to requests made for it (``request_registered_call``) on that
    queue, and every other method to the sync server as before. The inference lane
    (:mod:`edge_agent.frontends.grpc.infer_lane`) polls it. Where the installed grpcio lacks
    any of it, :func:`attach_queue` returns None and ModelInfer stays on the handler threads.

Public APIs only elsewhere: handlers are built from the services' protobuf descriptors with
``grpc.*_rpc_method_handler`` (:func:`service_handlers`, :func:`rebuild`), never by capturing
a generated ``add_*_to_server`` or by the handler namedtuple's ``_replace``; the pools keep
their own worker counts. ``grpc.server(interceptors=...)`` (the management token check) is
public though documented as experimental. When a hook is missing, the agent still serves on
public behaviour and logs ONE warning naming the protections reduced (:meth:`Hooks.reduced`).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import asdict, dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

log = logging.getLogger(__name__)

THREAD_POOL_ATTR = "experimental_thread_pool"
"""The handler attribute grpc's sync server reads for a per-method pool."""
NON_BLOCKING_ATTR = "experimental_non_blocking"
"""The handler attribute that makes grpc's sync server pass a send-response callback."""
EVENT_INDEX = 1
"""Where the call's event sits among the arguments grpc passes its pool's ``submit``."""
FUTURE_METHODS = frozenset({"add_done_callback", "done", "cancel"})
"""What LeanPool's call objects provide of a Future (grpc must use nothing else)."""

PROBE_TIMEOUT_S = 10.0
"""Each self-test call's deadline (generous: a loaded 2-core device)."""

_REDUCED = {
    "thread_pool": "ModelStreamInfer and health share the inference handler pool "
                   "(inference load can delay health checks)",
    "non_blocking": "each open ModelStreamInfer stream holds a handler thread, and management "
                    "calls with a wrong token are answered at once, not late",
    "lean_future": "handler pools return full Futures (slower, no protection lost)",
    "rpc_event": "calls whose request never arrives are not cancelled "
                 "(grpc.request_arrival_s is not enforced)",
}


@dataclass(frozen=True)
class Hooks:
    """Which hooks the installed grpcio honours (see the module docstring)."""

    grpcio: str
    thread_pool: bool
    non_blocking: bool
    lean_future: bool
    rpc_event: bool
    problem: str = ""
    """Why the self-test could not run (every hook is then taken as missing)."""

    def missing(self) -> list[str]:
        """Names of the hooks not honoured."""
        return [name for name in _REDUCED if not getattr(self, name)]

    def reduced(self) -> list[str]:
        """What is reduced, one phrase per missing hook."""
        return [_REDUCED[name] for name in self.missing()]

    def summary(self) -> str:
        """One line: the grpcio version and which hooks are present."""
        missing = self.missing()
        if not missing:
            return f"grpcio {self.grpcio}: all {len(_REDUCED)} server hooks present"
        why = f" (self-test failed: {self.problem})" if self.problem else ""
        return f"grpcio {self.grpcio}: missing {', '.join(missing)}{why}"

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return asdict(self)


_lock = threading.Lock()
_hooks: Hooks | None = None


def hooks() -> Hooks:
    """The self-test's result, run once per process (logged once: INFO when every hook is
    present, else ONE warning naming the protections reduced)."""
    global _hooks
    with _lock:
        if _hooks is None:
            t0 = time.monotonic()
            _hooks = self_test()
            ms = (time.monotonic() - t0) * 1000
            if _hooks.missing():
                log.warning("%s; the agent serves on grpcio's public behaviour but its abuse "
                            "protections are reduced: %s. Install a grpcio this agent supports "
                            "(see the agent extra in pyproject.toml)", _hooks.summary(),
                            "; ".join(_hooks.reduced()))
            else:
                log.info("%s (self-test %.0f ms)", _hooks.summary(), ms)
        return _hooks


def reset() -> None:
    """Forget the self-test's result (the next :func:`hooks` runs it again)."""
    global _hooks
    with _lock:
        _hooks = None


# --- what the rest of the agent calls ------------------------------------------------------

def on_pool(behavior: Callable[..., Any], pool: futures.ThreadPoolExecutor) -> None:
    """Ask grpc to run ``behavior``'s calls on ``pool`` (hook ``thread_pool``)."""
    setattr(behavior, THREAD_POOL_ATTR, pool)


def non_blocking(behavior: Callable[..., Any], on: bool = True) -> None:
    """Ask grpc to pass ``behavior`` a send-response callback (hook ``non_blocking``); the
    behavior must also work without one (grpc then iterates what it returns)."""
    setattr(behavior, NON_BLOCKING_ATTR, on)


def is_non_blocking(behavior: Callable[..., Any]) -> bool:
    """Whether ``behavior`` asked for a send-response callback (e.g. grpc_health's Watch)."""
    return bool(getattr(behavior, NON_BLOCKING_ATTR, False))


def rpc_event(args: tuple[Any, ...]) -> Any:
    """The call's event among the arguments grpc gave a pool's ``submit``, or None."""
    event = args[EVENT_INDEX] if len(args) > EVENT_INDEX else None
    if hasattr(event, "call_details") and hasattr(event, "call"):
        return event
    return None


def call_behavior(args: tuple[Any, ...]) -> Any:
    """The handler behavior among the arguments grpc gave a pool's ``submit``, or None."""
    return args[EVENT_INDEX + 2] if len(args) > EVENT_INDEX + 2 else None


def cancel(event: Any) -> None:
    """Cancel the call of ``event`` (from :func:`rpc_event`)."""
    event.call.cancel()


def time_left(event: Any) -> float:
    """Seconds left before the deadline of ``event``'s call (from :func:`rpc_event`; huge
    when it has none), as ``_Context.time_remaining`` computes it."""
    return float(event.call_details.deadline - time.time())


def connection(event: Any) -> bytes:
    """The peer of ``event``'s call ("ipv4:127.0.0.1:PORT", "unix:..."): one per connection
    over TCP."""
    peer: bytes = event.call.peer()
    return peer


def answer(event: Any, code: grpc.StatusCode, details: str) -> None:
    """End the call of ``event`` (from :func:`rpc_event`) with ``code`` and ``details``, its
    request unread and no handler run: the core's cancel-with-status, which a server stream
    answers with that status in its trailers (``Call.cancel(code, details)`` of cygrpc); a
    plain cancel (CANCELLED) where it is refused."""
    try:
        event.call.cancel(code.value[0], details)
    except TypeError:
        event.call.cancel()


def event_method(event: Any) -> str:
    """The method ``event``'s call asked for ("?" when grpc does not say)."""
    method = getattr(event.call_details, "method", b"") or b"?"
    return method.decode(errors="replace") if isinstance(method, bytes) else str(method)


_MAKERS: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def behavior_of(handler: grpc.RpcMethodHandler[Any, Any]) -> Callable[..., Any]:
    """The function ``handler`` runs, whatever its kind."""
    behavior = (handler.unary_unary or handler.unary_stream or handler.stream_unary
                or handler.stream_stream)
    assert behavior is not None  # every handler has one kind
    return behavior


def rebuild(handler: grpc.RpcMethodHandler[Any, Any], *,
            behavior: Callable[..., Any] | None = None,
            request_deserializer: Callable[[bytes], Any] | None = None
            ) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` with ``behavior`` and/or ``request_deserializer`` replaced (public API)."""
    make = _MAKERS[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return make(behavior or behavior_of(handler),
                request_deserializer=request_deserializer or handler.request_deserializer,
                response_serializer=handler.response_serializer)


def service_handlers(servicer: object, service: ServiceDescriptor
                     ) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """Method name -> handler for ``servicer`` implementing ``service``, from the service's
    protobuf descriptor (what a generated ``add_*_to_server`` registers)."""
    out: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        make = _MAKERS[(method.client_streaming, method.server_streaming)]
        out[method.name] = make(getattr(servicer, method.name),
                                request_deserializer=request.FromString,
                                response_serializer=response.SerializeToString)
    return out


# --- the inference lane's queue (hook core_queue) --------------------------------------------

try:
    from grpc._cython import cygrpc  # type: ignore[attr-defined]  # grpcio ships no stub for it
except ImportError:  # pragma: no cover - every grpcio wheel has it
    cygrpc = None


class CoreQueue:
    """A completion queue that receives the calls of one registered method."""

    def __init__(self, core: Any, queue: Any, method: str) -> None:
        self._core = core
        self._queue = queue
        self._method = method

    def request(self, tag: object) -> None:
        """Ask for the method's next call (its event comes back with ``tag``)."""
        self._core.request_registered_call(self._queue, self._queue, self._method, tag)

    def poll(self) -> Any:
        """The next event (waits for one)."""
        return self._queue.poll()

    def poll_ready(self) -> Any:
        """The next event if one is ready now; else one that :meth:`timed_out` (no wait)."""
        return self._queue.poll(0.0)  # a deadline already past

    @staticmethod
    def timed_out(event: Any) -> bool:
        """Whether ``event`` (of :meth:`poll_ready`) says no event was ready."""
        return bool(event.completion_type == cygrpc.CompletionType.queue_timeout)

    @staticmethod
    def shut_down(event: Any) -> bool:
        """Whether ``event`` says the queue has shut down (nothing more will come)."""
        return bool(event.completion_type == cygrpc.CompletionType.queue_shutdown)

    @staticmethod
    def receive(call: Any, tag: object) -> None:
        """Start reading the call's one request message."""
        call.start_server_batch((cygrpc.ReceiveMessageOperation(0),), tag)

    @staticmethod
    def message(event: Any) -> bytes | None:
        """The request message a :meth:`receive` event carries (None: the call ended)."""
        if not event.success:
            return None
        data: bytes | None = event.batch_operations[0].message()
        return data

    @staticmethod
    def watch_close(call: Any, tag: object) -> None:
        """Be told (an event with ``tag``) when the call ends, answered or cancelled."""
        call.start_server_batch((cygrpc.ReceiveCloseOnServerOperation(0),), tag)

    @staticmethod
    def answer(call: Any, message: bytes | None, code: grpc.StatusCode, details: str,
               tag: object) -> None:
        """Send the response ``message`` (None: none) and the status, in one batch."""
        operations = [cygrpc.SendInitialMetadataOperation(None, 0)]
        if message is not None:
            operations.append(cygrpc.SendMessageOperation(message, 0))
        operations.append(cygrpc.SendStatusFromServerOperation(
            None, code.value[0], details.encode(errors="replace"), 0))
        call.start_server_batch(tuple(operations), tag)

    def shutdown(self) -> None:
        """Shut the queue down (after the server stopped); polls then end with
        :meth:`shut_down`."""
        self._queue.shutdown()


def attach_queue(server: grpc.Server, method: str) -> CoreQueue | None:
    """Before ``server.start()``: a queue that receives ``method``'s calls (the sync server
    must have no handler registered for it), or None when this grpcio cannot."""
    try:
        core = server._cy_server  # type: ignore[attr-defined]  # grpcio's private field
        queue = cygrpc.CompletionQueue()
        core.register_completion_queue(queue)
        core.register_method(method)
    except Exception as exc:  # any grpcio without these: the sync server serves it
        log.warning("grpcio %s cannot serve %s from a queue of its own (%s); it is served on "
                    "the handler threads", grpc.__version__, method, exc)
        return None
    return CoreQueue(core, queue, method)


# --- the self-test ---------------------------------------------------------------------------

_PROBE = "edge.selftest.Probe"


class _Watched:
    """What a probe pool's ``submit`` returns: a real Future, noting what grpc uses of it."""

    __slots__ = ("_future", "_used")

    def __init__(self, future: futures.Future[Any], used: set[str]) -> None:
        self._future = future
        self._used = used

    def __getattr__(self, name: str) -> Any:
        self._used.add(name)
        return getattr(self._future, name)


class _ProbePool(futures.ThreadPoolExecutor):
    """A pool that records, for each submission, whether the call's event was where
    :data:`EVENT_INDEX` says, and cancels the next call when asked."""

    def __init__(self, name: str) -> None:
        super().__init__(max_workers=2, thread_name_prefix=name)
        self.name = name
        self.used: set[str] = set()
        self.events: list[bool] = []
        self.behaviors: list[Any] = []
        self.cancel_next = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        event = rpc_event(args)
        self.events.append(event is not None)
        self.behaviors.append(call_behavior(args))
        if self.cancel_next and event is not None:
            self.cancel_next = False
            cancel(event)
        return _Watched(super().submit(fn, *args, **kwargs), self.used)


def _ran(request: bytes, context: grpc.ServicerContext) -> bytes:
    return b"ran"


def self_test() -> Hooks:
    """Check each hook on a throwaway server (a Unix socket in a temporary directory, removed
    after): a call whose handler asks for another pool, a non-blocking stream, a call
    cancelled through its event, and what the server used of the pools' returns."""
    version = getattr(grpc, "__version__", "?")
    main, side = _ProbePool("selftest-main"), _ProbePool("selftest-side")
    folder = tempfile.mkdtemp(prefix="edge-grpc-")
    server = grpc.server(main)
    channel: grpc.Channel | None = None
    try:
        def pool_name(request: bytes, context: grpc.ServicerContext) -> bytes:
            return threading.current_thread().name.encode()

        def push(requests: Iterator[bytes], context: grpc.ServicerContext,
                 send: Callable[[Any], None] | None = None) -> Iterator[bytes] | None:
            if send is None:  # grpc ignored the non-blocking attribute
                return iter([b"blocking"])
            send(b"non-blocking")
            send(None)
            return None

        on_pool(pool_name, side)
        non_blocking(push)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_PROBE, {
            "Pool": grpc.unary_unary_rpc_method_handler(pool_name),
            "Push": grpc.stream_stream_rpc_method_handler(push),
            "Cancel": grpc.unary_unary_rpc_method_handler(_ran),
        }),))
        target = f"unix:{folder}/probe.sock"
        server.add_insecure_port(target)
        server.start()
        channel = grpc.insecure_channel(target)
        raw = {"request_serializer": None, "response_deserializer": None}
        on_side = channel.unary_unary(f"/{_PROBE}/Pool", **raw)(b"", timeout=PROBE_TIMEOUT_S)
        pushed = list(channel.stream_stream(f"/{_PROBE}/Push", **raw)(
            iter([b""]), timeout=PROBE_TIMEOUT_S))
        main.cancel_next = True
        try:
            channel.unary_unary(f"/{_PROBE}/Cancel", **raw)(b"", timeout=PROBE_TIMEOUT_S)
            cancelled = False
        except grpc.RpcError as exc:
            cancelled = exc.code() == grpc.StatusCode.CANCELLED
        events = main.events + side.events
        return Hooks(
            grpcio=version,
            thread_pool=on_side.decode().startswith(side.name),
            non_blocking=pushed == [b"non-blocking"],
            lean_future=not (main.used | side.used) - FUTURE_METHODS,
            rpc_event=bool(events) and all(events) and cancelled and _ran in main.behaviors)
    except Exception as exc:  # the probe itself failed: trust no hook
        return Hooks(version, False, False, False, False, problem=f"{type(exc).__name__}: {exc}")
    finally:
        if channel is not None:
            channel.close()
        # a graceful stop: the probe's calls have ended, so it returns at once, and its GOAWAY
        # says NO_ERROR (an immediate stop's GOAWAY is logged by a client still connected)
        server.stop(PROBE_TIMEOUT_S).wait(PROBE_TIMEOUT_S)
        main.shutdown(wait=False)
        side.shutdown(wait=False)
        shutil.rmtree(folder, ignore_errors=True)

