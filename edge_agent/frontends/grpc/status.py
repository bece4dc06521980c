"""The ONE place that maps the agent's errors to gRPC status codes."""

from __future__ import annotations

from typing import NoReturn

import grpc

from edge_agent.errors import AgentError, ErrorCode
from edge_agent.frontends.common.control import error_message

__all__ = ["GRPC_CODES", "abort", "error_message", "grpc_code"]

GRPC_CODES: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
}


def grpc_code(exc: BaseException) -> grpc.StatusCode:
    """The status code for ``exc``: its ErrorCode for agent errors, INTERNAL for anything else."""
    if isinstance(exc, AgentError):
        return GRPC_CODES.get(exc.code, grpc.StatusCode.INTERNAL)
    return grpc.StatusCode.INTERNAL


def abort(context: grpc.ServicerContext, exc: BaseException) -> NoReturn:
    """End the RPC with the status that ``exc`` maps to (never returns)."""
    context.abort(grpc_code(exc), error_message(exc))
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover
