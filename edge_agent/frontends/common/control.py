"""What the gRPC and HTTP front ends share: no gRPC or HTTP here.

Both serve the KServe v2 protocol from one :class:`~edge_agent.core.api.DataPlaneAPI`; the
rules that are not about a wire format live here once: the text a caller sees for an error,
the model-name check, repository control (who may load and unload, which parameters are
refused, the log line), and the protocol extensions a front end lists in its metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from edge_agent.deploy.errors import RepositoryControlDisabledError
from edge_agent.errors import AgentError, InvalidInputError

log = logging.getLogger("edge_agent.frontends.grpc.servicer")  # one logger for model control


class RepositoryControl(Protocol):
    """Who changes what is loaded on RepositoryModelLoad/Unload: the model manager, the one
    writer (so these calls take its per-model lock and never race a deploy)."""

    def load_model(self, name: str) -> str:
        """Load the active version of ``name``; returns a one-line summary for the log."""
        ...

    def unload_model(self, name: str) -> str:
        """Unload every version of ``name``; returns a one-line summary for the log."""
        ...


def error_message(exc: BaseException) -> str:
    """The text a caller sees: the agent error's message, or a generic line for a bug."""
    if isinstance(exc, AgentError):
        return str(exc) or type(exc).__name__
    return f"internal error: {type(exc).__name__}: {exc}"


def model_name(name: str) -> str:
    """``name`` when given; InvalidInputError for an empty one."""
    if not name:
        raise InvalidInputError("empty request: model name is missing")
    return name


def extensions(control: RepositoryControl | None, shared_memory: bool,
               binary_tensor_data: bool = False) -> tuple[str, ...]:
    """The KServe/Triton protocol extensions a front end serves, by Triton's names, and only
    those: classification, schedule policy (the request parameters priority and timeout),
    model configuration and statistics always; the model repository when model control is
    on; system shared memory where the system has it; binary tensor data on HTTP. Not
    sequence, trace, logging, parameters or cuda_shared_memory (not served)."""
    return ("classification", "schedule_policy", "model_configuration", "statistics") + (
        ("model_repository",) if control is not None else ()) + (
        ("system_shared_memory",) if shared_memory else ()) + (
        ("binary_tensor_data",) if binary_tensor_data else ())


def control_or_refuse(control: RepositoryControl | None, call: str) -> RepositoryControl:
    """``control``, or RepositoryControlDisabledError naming the setting that turns it on."""
    if control is None:
        raise RepositoryControlDisabledError(
            f"{call} is turned off on this agent: model control over the inference port "
            "is unauthenticated, so it is off unless agent.toml sets "
            "'[grpc] repository_control = true'; deploy, activate and roll back through "
            "the management API (edge-console) instead")
    return control


UNLOAD_PARAMETERS = ("unload_dependents",)
"""What RepositoryModelUnload accepts (tritonclient always sends it); load accepts none."""


def refuse_parameters(call: str, parameters: Iterable[str], allowed: tuple[str, ...]) -> None:
    """InvalidInputError naming every parameter of ``call`` not in ``allowed``."""
    unknown = sorted(k for k in parameters if k not in allowed)
    if unknown:
        raise InvalidInputError(
            f"{call}: parameter(s) {', '.join(repr(k) for k in unknown)} are not supported: "
            "this agent serves only versions deployed through its management API (no "
            "'config' or 'file:' overrides); send the request without them")


def log_control(call: str, name: str, peer: str, result: str | BaseException) -> None:
    """Every model-control call is logged with its peer (they change what is served)."""
    if isinstance(result, BaseException):
        log.warning("%s of %r from %s refused: %s", call, name, peer, error_message(result))
    else:
        log.warning("%s of %r from %s: %s", call, name, peer, result)
