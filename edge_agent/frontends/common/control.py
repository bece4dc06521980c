"""Repository control over the inference port, the same on both front ends: who may load and
unload, which parameters are refused, and the log line every such call leaves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from edge_agent.errors import AgentError, ErrorCode, InvalidInputError
from edge_agent.frontends.common.errors import error_message

log = logging.getLogger("edge_agent.frontends.grpc.servicer")  # one logger for model control


class RepositoryControlDisabledError(AgentError):
    """Model load/unload over the inference protocol is turned off (the default)."""

    code = ErrorCode.UNAVAILABLE


class RepositoryControl(Protocol):
    """Who changes what is loaded on RepositoryModelLoad/Unload: the model manager, the one
    writer (so these calls take its per-model lock and never race a deploy)."""

    def load_model(self, name: str) -> str:
        """Load the active version of ``name``; returns a one-line summary for the log."""
        ...

    def unload_model(self, name: str) -> str:
        """Unload every version of ``name``; returns a one-line summary for the log."""
        ...


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
