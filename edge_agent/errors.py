"""The agent's error hierarchy.

Core code raises these; the protocol edge maps ``code`` to a gRPC status in one place.
Messages name the model, the tensor and what was expected, so a caller can act on them.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

_E = TypeVar("_E", bound=BaseException)


class ErrorCode(Enum):
    """Protocol-neutral status codes (mapped 1:1 to gRPC codes at the edge)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    INTERNAL = "INTERNAL"


class AgentError(Exception):
    """Base of every error the agent reports to a caller."""

    code: ErrorCode = ErrorCode.INTERNAL


class InvalidInputError(AgentError):
    """The request does not match the model's signature (dtype, shape, names, sizes)."""

    code = ErrorCode.INVALID_ARGUMENT


class DecoupledModelError(InvalidInputError):
    """Unary inference on a decoupled model (it answers only over ModelStreamInfer)."""


class TraceSettingError(AgentError):
    """A trace setting (Triton's trace extension) that is unknown, malformed or not served."""

    code = ErrorCode.INVALID_ARGUMENT


class ModelNotFoundError(AgentError):
    """No such model, or no such version of it."""

    code = ErrorCode.NOT_FOUND


class QueueFullError(AgentError):
    """The model's queue is full; the caller should back off and retry."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class ModelUnavailableError(AgentError):
    """The model exists but is not ready (loading, unloading, or failed)."""

    code = ErrorCode.UNAVAILABLE


class RequestTimeoutError(AgentError):
    """The request waited in the queue or ran longer than its timeout."""

    code = ErrorCode.DEADLINE_EXCEEDED


class RequestCancelledError(AgentError):
    """The caller gave up (it cancelled, its gRPC deadline passed or its connection closed)
    before the request ran: it was taken out of the queue and never executed."""

    code = ErrorCode.CANCELLED


class BackendError(AgentError):
    """A backend failed to load a model or to run an inference."""

    code = ErrorCode.INTERNAL


class BackendCrashedError(BackendError):
    """The runtime process of an isolated model died during an inference; it is restarted."""

    code = ErrorCode.UNAVAILABLE


class RuntimeMissingError(BackendError):
    """The runtime a backend needs (OpenVINO, TensorRT, ...) is not installed on this device."""

    code = ErrorCode.FAILED_PRECONDITION


class ConfigError(AgentError):
    """The agent's configuration file or flags are invalid."""

    code = ErrorCode.INVALID_ARGUMENT


class StateStoreError(AgentError):
    """The agent's state database (or token file) in the state directory cannot be used."""

    code = ErrorCode.FAILED_PRECONDITION


class ServiceInstallError(AgentError):
    """The systemd unit could not be rendered or installed."""

    code = ErrorCode.FAILED_PRECONDITION


def detached(exc: _E) -> _E:
    """``exc`` kept as a value (an answer in a list, returned rather than raised): without
    its traceback and context. A caught exception's traceback holds the frame that caught it
    and, through it, its callers' frames: kept in one of their locals, that is a cycle only the
    garbage collector frees, and every request those frames hold stays in memory until then."""
    exc.__traceback__ = None
    exc.__context__ = None
    return exc
