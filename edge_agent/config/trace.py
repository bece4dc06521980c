"""``[trace]`` in agent.toml: Triton's trace settings at start and the OpenTelemetry collector.

Example::

    [trace]
    otlp_endpoint = "http://127.0.0.1:4318"   # an OTLP/HTTP collector (default: none)
    trace_level = ["TIMESTAMPS"]              # OFF (the default), TIMESTAMPS and/or TENSORS
    trace_rate = 1000                         # one request traced of every 1000
    trace_count = -1                          # traces left to take (-1: no limit)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from edge_agent.config.fields import Key, parse_table
from edge_agent.errors import ConfigError

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")


@dataclass(frozen=True)
class TraceConfig:
    """Tracing at start: off unless ``trace_level`` names a level (and then needs a
    collector); the settings can change at run time through Triton's trace extension."""

    otlp_endpoint: str | None = None
    """The OTLP/HTTP collector spans are exported to (``/v1/traces`` appended to a bare URL)."""
    trace_level: tuple[str, ...] = ("OFF",)
    trace_rate: int = 1000
    trace_count: int = -1


def trace_levels(values: Sequence[str], where: str) -> tuple[str, ...]:
    """Validated trace levels: ``OFF`` alone, or TIMESTAMPS and/or TENSORS (ValueError)."""
    levels = tuple(dict.fromkeys(v.strip().upper() for v in values))
    unknown = [v for v in levels if v not in LEVELS]
    if unknown or not levels:
        raise ValueError(f"{where}: unknown trace level {unknown or values!r}; expected OFF, "
                         "TIMESTAMPS or TENSORS (or both of the last two)")
    if "OFF" in levels and len(levels) > 1:
        raise ValueError(f"{where}: OFF cannot be combined with {list(levels[1:])!r}")
    return levels


def trace_number(value: str | int, name: str, where: str) -> int:
    """``trace_rate`` (>= 1) or ``trace_count`` (>= -1) as an integer (ValueError)."""
    low = 1 if name == "trace_rate" else -1
    try:
        number = int(value)
        if isinstance(value, bool) or number < low:
            raise ValueError
    except ValueError:
        raise ValueError(f"{where}: '{name}' must be an integer >= {low}, got {value!r}"
                         ) from None
    return number


def otlp_traces_url(value: str, where: str) -> str:
    """``http(s)://HOST:PORT[/path]``; a URL without a path gets OTLP's ``/v1/traces``."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"config key '{where}': expected an OTLP/HTTP URL like "
                          f"\"http://127.0.0.1:4318\", got {value!r}")
    return value if parts.path not in ("", "/") else value.rstrip("/") + "/v1/traces"


def _endpoint(key: str, value: Any) -> str | None:
    if not isinstance(value, str):
        raise ConfigError(f"config key '{key}': expected a URL string, got {value!r}")
    return otlp_traces_url(value, key) if value else None


def _levels(key: str, value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise ConfigError(f"config key '{key}': expected a level or a list of levels, "
                          f"got {value!r}")
    try:
        return trace_levels(items, f"config key '{key}'")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _number(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
    try:
        return trace_number(value, key.rsplit(".", 1)[-1], f"config key '{key}'")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


KEYS = (
    Key("otlp_endpoint", _endpoint),
    Key("trace_level", _levels),
    Key("trace_rate", _number),
    Key("trace_count", _number),
)


def trace_section(data: Any) -> TraceConfig:
    """Parse ``[trace]``; a level other than OFF without a collector is an error."""
    config = TraceConfig(**parse_table("trace", data, KEYS))
    if config.trace_level != ("OFF",) and config.otlp_endpoint is None:
        raise ConfigError("config key 'trace.trace_level' is "
                          f"{list(config.trace_level)} but no collector is set: add "
                          "otlp_endpoint = \"http://127.0.0.1:4318\" to [trace]")
    return config
