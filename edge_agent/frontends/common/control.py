"""Repository control over the inference port, the same on both front ends: who may load and
unload, which parameters are refused, and the log line every such call leaves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from edge_agent.errors import AgentError, ErrorCode, InvalidInputError
from edge_agent.frontends.common.config_override import config_settings
from edge_agent.frontends.common.errors import error_message

log = logging.getLogger("edge_agent.frontends.grpc.servicer")  # one logger for model control


class RepositoryControlDisabledError(AgentError):
    """Model load/unload over the inference protocol is turned off (the default)."""

    code = ErrorCode.UNAVAILABLE


class RepositoryControl(Protocol):
    """Who changes what is loaded on RepositoryModelLoad/Unload: the model manager, the one
    writer (so these calls take its per-model lock and never race a deploy)."""

    def load_model(self, name: str, settings: Mapping[str, Any] | None = None) -> str:
        """Load the active version of ``name``, first applying ``settings`` (live settings
        keys, from a load's ``config``) as a live settings change; returns a one-line summary
        for the log."""
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


class ModelFilesRefusedError(AgentError):
    """A load carried ``file:`` parameters whose path Triton itself could not poll (a path
    component longer than NAME_MAX): answered as Triton answers it, INTERNAL."""

    code = ErrorCode.INTERNAL


UNLOAD_PARAMETERS = ("unload_dependents",)
"""What RepositoryModelUnload accepts (tritonclient always sends it)."""

LOAD_PARAMETERS = ("config",)
"""What RepositoryModelLoad accepts: Triton's ModelConfig JSON (frontends/common/
config_override.py). Its ``file:PATH`` parameters (a model directory sent with the request)
are refused: the agent serves only signed bundles."""

_FILE_PREFIX = "file:"
_NAME_MAX = 255  # bytes in one path component (Linux); Triton's own limit on file: paths


def _refuse_files(name: str, keys: list[str]) -> None:
    named = ", ".join(repr(k if len(k) <= 80 else k[:77] + "...") for k in keys)
    advice = (f"this agent loads only signed bundles, never model files sent with a load "
              f"(parameter(s) {named}); build a bundle with edge-pack and deploy it with "
              "edge-console")
    if any(len(part.encode()) > _NAME_MAX
           for key in keys for part in key[len(_FILE_PREFIX):].split("/")):
        raise ModelFilesRefusedError(
            f"failed to poll from model repository: a path component of a 'file:' parameter "
            f"of the load of {name!r} is longer than {_NAME_MAX} bytes; {advice}")
    raise InvalidInputError(f"load of {name!r}: {advice}")


def load_settings(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The live settings a model load's ``parameters`` ask for (empty without ``config``).

    ``file:`` parameters are refused (ModelFilesRefusedError with Triton's INTERNAL and
    wording where Triton refuses the path too, else InvalidInputError), any other parameter
    but ``config`` by name (InvalidInputError); ``config`` is read by config_settings."""
    files = sorted(k for k in parameters if k.startswith(_FILE_PREFIX))
    if files:
        _refuse_files(name, files)
    refuse_parameters("RepositoryModelLoad", parameters, allowed=LOAD_PARAMETERS)
    if "config" not in parameters:
        return {}
    return config_settings(name, parameters["config"])


def refuse_parameters(call: str, parameters: Iterable[str], allowed: tuple[str, ...]) -> None:
    """InvalidInputError naming every parameter of ``call`` not in ``allowed``."""
    unknown = sorted(k for k in parameters if k not in allowed)
    if unknown:
        raise InvalidInputError(
            f"{call}: parameter(s) {', '.join(repr(k) for k in unknown)} are not supported "
            f"(accepted: {', '.join(repr(k) for k in allowed) or 'none'}); send the request "
            "without them")


def log_control(call: str, name: str, peer: str, result: str | BaseException) -> None:
    """Every model-control call is logged with its peer (they change what is served)."""
    if isinstance(result, BaseException):
        log.warning("%s of %r from %s refused: %s", call, name, peer, error_message(result))
    else:
        log.warning("%s of %r from %s: %s", call, name, peer, result)
