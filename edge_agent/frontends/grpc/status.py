"""The ONE error path of a gRPC servicer: the agent's errors to status codes, in one decorator.

The codes come from the front ends' one error mapping (:mod:`edge_agent.frontends.common.errors`);
:func:`rpc_errors` wraps a unary handler (:func:`rpc_stream_errors` a streaming one) so that
any exception it raises ends the call with the status its :class:`~edge_agent.errors.ErrorCode`
maps to (INTERNAL, logged with its traceback, for anything that is not an agent error). Both
gRPC services (inference and management) use them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

import grpc

from edge_agent.errors import AgentError, ErrorCode
from edge_agent.frontends.common.errors import STATUS, error_message, wire_status

__all__ = ["GRPC_CODES", "abort", "error_message", "grpc_code", "rpc_errors",
           "rpc_stream_errors", "without_raising"]

GRPC_CODES: dict[ErrorCode, grpc.StatusCode] = {
    code: grpc.StatusCode[status.grpc] for code, status in STATUS.items()}


def grpc_code(exc: BaseException) -> grpc.StatusCode:
    """The status code for ``exc``: its ErrorCode for agent errors, INTERNAL for anything else."""
    return grpc.StatusCode[wire_status(exc).grpc]


def abort(context: grpc.ServicerContext, exc: BaseException) -> NoReturn:
    """End the RPC with the status that ``exc`` maps to (never returns)."""
    context.abort(grpc_code(exc), error_message(exc))
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


_S = TypeVar("_S")
_Req = TypeVar("_Req")
_R = TypeVar("_R")
_Handler = Callable[[_S, _Req, grpc.ServicerContext], _R]


def _end(log: logging.Logger, service: str, context: grpc.ServicerContext,
         exc: Exception) -> NoReturn:
    if type(exc) is Exception:  # context.abort() set the status, then raised this
        raise exc
    if not isinstance(exc, AgentError):
        log.exception("unexpected error in the %s", service, exc_info=exc)
    abort(context, exc)


def without_raising(log: logging.Logger, service: str, context: grpc.ServicerContext,
                    exc: Exception) -> Exception:
    """What :func:`rpc_errors`' handler raises for ``exc`` (the call aborted with its
    status), returned: for a servicer answering several calls at once."""
    try:
        _end(log, service, context, exc)
    except Exception as raised:
        return raised


def rpc_errors(log: logging.Logger, service: str
               ) -> Callable[[_Handler[_S, _Req, _R]], _Handler[_S, _Req, _R]]:
    """Decorate a servicer's unary handler ``(self, request, context)``: an exception ends the
    call with its status (:func:`abort`); one that is not an agent error is logged first as
    unexpected in ``service``. A call the handler already aborted keeps its own status."""

    def wrap(handler: _Handler[_S, _Req, _R]) -> _Handler[_S, _Req, _R]:
        @functools.wraps(handler)
        def guarded(self: _S, request: _Req, context: grpc.ServicerContext) -> _R:
            try:
                return handler(self, request, context)
            except Exception as exc:
                _end(log, service, context, exc)

        return guarded

    return wrap


_Stream = Callable[[_S, _Req, grpc.ServicerContext], Iterator[_R]]


def rpc_stream_errors(log: logging.Logger, service: str
                      ) -> Callable[[_Stream[_S, _Req, _R]], _Stream[_S, _Req, _R]]:
    """:func:`rpc_errors` for a handler that yields its responses (server streaming)."""

    def wrap(handler: _Stream[_S, _Req, _R]) -> _Stream[_S, _Req, _R]:
        @functools.wraps(handler)
        def guarded(self: _S, request: _Req, context: grpc.ServicerContext) -> Iterator[_R]:
            try:
                yield from handler(self, request, context)
            except Exception as exc:
                _end(log, service, context, exc)

        return guarded

    return wrap
