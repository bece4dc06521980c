"""The inference and health services' method handlers, as the agent's server registers them.

Built from the services' descriptors (what the generated ``add_*_to_server`` registers; the
gRPC hooks used are all in :mod:`~edge_agent.grpc_internals`), with three changes:
every request deserializer turns bytes that do not parse into a
:class:`~edge_agent.frontends.common.undecodable.Undecodable` (the call gets
INVALID_ARGUMENT and one rate-limited log line, not a traceback per call); unary calls that
:class:`~edge_agent.frontends.grpc.admission.AdmissionPool` did not admit are refused with
RESOURCE_EXHAUSTED before any work (and calls whose request never arrives are cancelled,
:class:`~edge_agent.frontends.grpc.admission.ReceiveDeadline`); ModelStreamInfer (non-blocking)
and the health service (with KServe's ServerLive and ServerReady) run on thread pools of
their own, so neither streams nor inference load can take their threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent import futures
from typing import Any, TypeAlias

import grpc

from edge_agent import grpc_internals
from edge_agent.errors import QueueFullError
from edge_agent.frontends.common.typed_budget import HeldBudget, OverBudget, TypedBudget
from edge_agent.frontends.common.undecodable import (
    RefusedUnread,
    Undecodable,
    safe_deserializer,
)
from edge_agent.frontends.grpc.admission import (
    CLOSING,
    CLOSING_MESSAGE,
    REFUSED,
    ReceiveGate,
    refused,
    request_arrived,
)
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.frontends.grpc.generated import health_pb2, health_pb2_grpc
from edge_agent.frontends.grpc.received import ReceiveBudget, Received, claim_each, claimed
from edge_agent.frontends.grpc.status import abort
from edge_agent.frontends.grpc.typed_cost import TooManyTensors, typed_cost

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"

log = logging.getLogger(__name__)

INFERENCE_SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"
LIVENESS = frozenset({"ServerLive", "ServerReady"})
"""KServe's own health calls: served on the health pool, never refused."""
_INFERENCE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
_HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"]
_TYPED = frozenset({"ModelInfer", "ModelStreamInfer"})
"""Methods whose requests may carry typed contents (charged to the typed-input budget)."""


def _guarded_unary(behavior: Callable[[Any, grpc.ServicerContext], Any], method: str,
                   budgets: tuple[HeldBudget, ...] = ()
                   ) -> Callable[[Any, grpc.ServicerContext], Any]:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            request = claimed(request)  # what the deserializer charged: this call's now
            request_arrived()
            if method not in LIVENESS and (why := refused()):
                if why == CLOSING:
                    context.abort(grpc.StatusCode.UNAVAILABLE, CLOSING_MESSAGE)
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, REFUSED)
            if isinstance(request, Undecodable):
                abort(context, request.refused(method, context.peer()))
            return behavior(request, context)
        finally:
            for budget in budgets:  # what this call held
                budget.release_held()

    return handle


def budgeted_deserializer(decode: Callable[[bytes], Any], budget: TypedBudget,
                          message_type: str, received: ReceiveBudget | None = None
                          ) -> Callable[[bytes], Any]:
    """``decode`` that first reserves the message's size in ``received`` and what its typed
    contents will take in ``budget``, and hands on the parsed message as
    :class:`~edge_agent.frontends.grpc.received.Received` (the handler's thread claims the
    charges), or an :class:`OverBudget` refusal, unparsed, when a budget cannot take it (a
    :class:`RefusedUnread` when it names more than MAX_TENSORS inputs or outputs: the walk
    stops there, and neither it nor the parse costs the GIL the rest of the message)."""

    def run(data: bytes) -> Any:
        try:
            cost = typed_cost(data)
        except TooManyTensors as many:  # refused unread, as the converter would
            return RefusedUnread(message_type, many.refusal())
        charges: list[tuple[HeldBudget, int]] = []
        try:
            if received is not None and (size := received.charge_message(len(data))):
                charges.append((received, size))
            if cost:
                budget.reserve(cost, f"the request's typed contents ({len(data)} bytes)")
                charges.append((budget, cost))
        except QueueFullError as exc:
            for taken, nbytes in charges:
                taken.release(nbytes)
            # without its traceback, whose frame would keep ``data`` alive with the refusal
            return OverBudget(message_type, exc.with_traceback(None))
        return Received(decode(data), charges) if charges else decode(data)

    return run


def _claiming(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """A stream's ``behavior`` whose requests are claimed by the thread that reads them."""
    def run(requests: Any, *args: Any) -> Any:
        return behavior(claim_each(requests), *args)

    return run


def _on_pool(behavior: Callable[..., Any], pool: futures.ThreadPoolExecutor,
             non_blocking: bool) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        request_arrived()
        return behavior(*args)

    grpc_internals.on_pool(run, pool)
    grpc_internals.non_blocking(run, non_blocking)
    return run


def inference_handlers(servicer: pb_grpc.GRPCInferenceServiceServicer,
                       stream_pool: futures.ThreadPoolExecutor,
                       health_pool: futures.ThreadPoolExecutor,
                       budget: TypedBudget | None = None,
                       received: ReceiveBudget | None = None) -> dict[str, Handler]:
    """The inference service's handlers (see the module docstring); ServerLive and
    ServerReady run on ``health_pool``; ModelInfer and ModelStreamInfer charge their messages
    to ``received`` and their typed contents to ``budget`` before parsing
    (:func:`budgeted_deserializer`)."""
    out: dict[str, Handler] = {}
    for name, h in grpc_internals.service_handlers(servicer, _INFERENCE).items():
        decode = safe_deserializer(h.request_deserializer)
        typed = budget if name in _TYPED else None
        if typed is not None and decode is not None:
            decode = budgeted_deserializer(decode, typed, "ModelInferRequest", received)
        if h.unary_unary is not None:
            budgets = tuple(b for b in (typed, received) if b is not None) if typed else ()
            behavior = _guarded_unary(h.unary_unary, name, budgets)
            if name == "ModelInfer":  # its message may be large: received a few at a time
                ReceiveGate.gated(behavior)
            if name in LIVENESS:
                behavior = _on_pool(behavior, health_pool, False)
            out[name] = grpc_internals.rebuild(h, behavior=behavior, request_deserializer=decode)
        elif h.stream_stream is not None:
            out[name] = grpc_internals.rebuild(
                h, behavior=_on_pool(_claiming(h.stream_stream), stream_pool, True),
                request_deserializer=decode)
        else:  # pragma: no cover - the protocol has no other kinds
            out[name] = grpc_internals.rebuild(h, request_deserializer=decode)
    return out


def health_handlers(servicer: health_pb2_grpc.HealthServicer,
                    pool: futures.ThreadPoolExecutor) -> dict[str, Handler]:
    """The health service's handlers, every one on ``pool`` (never refused)."""
    out: dict[str, Handler] = {}
    for name, h in grpc_internals.service_handlers(servicer, _HEALTH).items():
        behavior = grpc_internals.behavior_of(h)
        out[name] = grpc_internals.rebuild(h, behavior=_on_pool(
            behavior, pool, grpc_internals.is_non_blocking(behavior)))
    return out


def register(server: Any, service: str,
             handlers: Mapping[str, Handler]) -> None:
    """Register ``handlers`` for ``service`` on ``server`` (both ways the generated
    ``add_*_to_server`` does: generic, and registered methods)."""
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service,
                                                                          dict(handlers)),))
    server.add_registered_method_handlers(service, handlers)
