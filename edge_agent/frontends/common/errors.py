"""The ONE error mapping of the front ends: what a caller sees for an error, on either wire.

Each :class:`~edge_agent.errors.ErrorCode` maps to a gRPC status code (by name, so this module
imports no grpc) and an HTTP status; :mod:`edge_agent.frontends.grpc.status` and the HTTP routes
read their codes from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.errors import AgentError, ErrorCode

__all__ = ["STATUS", "WireStatus", "error_message", "http_status", "wire_status"]


@dataclass(frozen=True, slots=True)
class WireStatus:
    """How one error code is answered: the gRPC ``StatusCode`` name and the HTTP status."""

    grpc: str
    http: int


STATUS: dict[ErrorCode, WireStatus] = {
    ErrorCode.INVALID_ARGUMENT: WireStatus("INVALID_ARGUMENT", 400),
    ErrorCode.NOT_FOUND: WireStatus("NOT_FOUND", 404),
    ErrorCode.RESOURCE_EXHAUSTED: WireStatus("RESOURCE_EXHAUSTED", 429),
    ErrorCode.UNAVAILABLE: WireStatus("UNAVAILABLE", 503),
    ErrorCode.DEADLINE_EXCEEDED: WireStatus("DEADLINE_EXCEEDED", 504),
    ErrorCode.CANCELLED: WireStatus("CANCELLED", 499),  # nginx's "client closed request"
    ErrorCode.FAILED_PRECONDITION: WireStatus("FAILED_PRECONDITION", 400),
    ErrorCode.UNAUTHENTICATED: WireStatus("UNAUTHENTICATED", 401),
    ErrorCode.ALREADY_EXISTS: WireStatus("ALREADY_EXISTS", 409),
    ErrorCode.INTERNAL: WireStatus("INTERNAL", 500),
}
_INTERNAL = STATUS[ErrorCode.INTERNAL]


def wire_status(exc: BaseException) -> WireStatus:
    """The status for ``exc``: its ErrorCode's for agent errors, INTERNAL for anything else."""
    if isinstance(exc, AgentError):
        return STATUS.get(exc.code, _INTERNAL)
    return _INTERNAL


def http_status(exc: BaseException) -> int:
    """The HTTP status for ``exc``."""
    return wire_status(exc).http


def error_message(exc: BaseException) -> str:
    """The text a caller sees: the agent error's message, or a generic line for a bug."""
    if isinstance(exc, AgentError):
        return str(exc) or type(exc).__name__
    return f"internal error: {type(exc).__name__}: {exc}"
