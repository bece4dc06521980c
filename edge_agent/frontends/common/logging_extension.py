"""The logging and trace extensions over the inference port, the same on both front ends and
under one rule: reading the log or trace settings is open; changing them only when ``[grpc]
log_control = true`` (any local caller could otherwise turn on verbose output or tracing of
every request and fill the journal or the collector), and every change leaves a log line."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from edge_agent.errors import AgentError, ErrorCode
from edge_agent.log_settings import LogSettings
from edge_agent.tracing import Tracing

log = logging.getLogger(__name__)


class LogControlDisabledError(AgentError):
    """Changing the log or trace settings over the inference port is turned off (the
    default)."""

    code = ErrorCode.UNAVAILABLE


def _refuse_change(what: str) -> LogControlDisabledError:
    return LogControlDisabledError(
        f"changing the {what} settings is turned off on this agent: the inference port is "
        "unauthenticated, so it is off unless agent.toml sets '[grpc] log_control = "
        "true'; reading them (no settings in the request) is always served")


def log_settings_call(settings: LogSettings, changes: Mapping[str, Any], *, allowed: bool,
                      peer: str) -> dict[str, Any]:
    """Every log setting after applying ``changes`` (none: a read)."""
    if not changes:
        return settings.current()
    if not allowed:
        raise _refuse_change("log")
    result = settings.update(changes)
    log.warning("log settings changed by %s: %s", peer,
                ", ".join(f"{k} = {v!r}" for k, v in sorted(changes.items())))
    return result


def trace_settings_call(tracing: Tracing, model: str,
                        changes: Mapping[str, Sequence[str] | None], *, allowed: bool,
                        peer: str) -> dict[str, list[str]]:
    """``model``'s ("" global) trace settings after applying ``changes`` (none: a read)."""
    if not changes:
        return tracing.get(model)
    if not allowed:
        raise _refuse_change("trace")
    result = tracing.update(model, changes)
    log.warning("trace settings%s changed by %s: %s", f" of model '{model}'" if model else "",
                peer, ", ".join(f"{k} = {v!r}" for k, v in sorted(changes.items())))
    return result
