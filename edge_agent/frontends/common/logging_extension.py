"""The logging extension over the inference port, the same on both front ends: reading the log
settings is open; changing them only when ``[grpc] log_control = true`` (any local caller could
otherwise turn on verbose output and fill the journal), and every change leaves a log line."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from edge_agent.errors import AgentError, ErrorCode
from edge_agent.log_settings import LogSettings

log = logging.getLogger(__name__)


class LogControlDisabledError(AgentError):
    """Changing the log settings over the inference port is turned off (the default)."""

    code = ErrorCode.UNAVAILABLE


def log_settings_call(settings: LogSettings, changes: Mapping[str, Any], *, allowed: bool,
                      peer: str) -> dict[str, Any]:
    """Every log setting after applying ``changes`` (none: a read)."""
    if not changes:
        return settings.current()
    if not allowed:
        raise LogControlDisabledError(
            "changing the log settings is turned off on this agent: the inference port is "
            "unauthenticated, so it is off unless agent.toml sets '[grpc] log_control = "
            "true'; reading them (no settings in the request) is always served")
    result = settings.update(changes)
    log.warning("log settings changed by %s: %s", peer,
                ", ".join(f"{k} = {v!r}" for k, v in sorted(changes.items())))
    return result
