"""``[http]`` in agent.toml and ``--http``: where and how the HTTP front end listens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge_agent.config.fields import (
    Key,
    boolean,
    parse_address,
    parse_table,
    positive_int,
    seconds,
)
from edge_agent.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class HttpConfig:
    """The HTTP front end: off (``listen`` None) unless configured."""

    listen: str | None = None
    max_body_bytes: int = 64 * 1024 * 1024
    """A request body larger than this is refused (413) before it is read."""
    max_connections: int = 64
    """Connections served at once (a thread each); beyond it: health checks only (8 reserve
    connections), else 503 and the connection closed."""
    idle_timeout_s: float = 30.0
    """A connection that sends nothing (between requests, or mid-request) this long is closed."""
    metrics: bool = True
    """Serve ``/metrics`` (Prometheus text format) on the same port."""
    shared_memory: bool = False
    """Serve system shared memory (any local user may call over TCP: off unless set)."""
    header_timeout_s: float = 10.0
    """A request's line and headers must arrive within this long of its first byte (408)."""
    body_timeout_s: float = 60.0
    """A request's body must arrive within this long of its headers (408)."""
    max_connections_per_peer: int = 32
    """Connections served at once from one client address (every local caller is one)."""
    max_inflate_ratio: int = 64
    """A compressed body may inflate to at most this many times its size (and max_body_bytes)."""
    max_json_elements: int = 262_144
    """JSON values (numbers, strings, arrays, objects) in one body, counted before parsing."""
    max_json_depth: int = 64
    """JSON nesting depth of one request body, checked before parsing."""
    metrics_cache_s: float = 1.0
    """A ``/metrics`` scrape is rendered at most once per this long (0: every scrape)."""


def listen_address(value: str, where: str) -> str | None:
    """HOST:PORT, or 127.0.0.1:PORT for a bare port; None for "", "none" or "off"."""
    text = value.strip()
    if text.isdigit():
        text = f"{DEFAULT_HOST}:{text}"
    return parse_address(text, where, example="127.0.0.1:8000")


def _listen(key: str, value: Any) -> str | None:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise ConfigError(f"config key '{key}': expected \"HOST:PORT\" or a port, got {value!r}")
    return listen_address(str(value), f"config key '{key}'")


KEYS = (
    Key("listen", _listen),
    Key("max_body_bytes", positive_int),
    Key("max_connections", positive_int),
    Key("idle_timeout_s", seconds(allow_zero=False)),
    Key("metrics", boolean),
    Key("shared_memory", boolean),
    Key("header_timeout_s", seconds(allow_zero=False)),
    Key("body_timeout_s", seconds(allow_zero=False)),
    Key("max_connections_per_peer", positive_int),
    Key("max_inflate_ratio", positive_int),
    Key("max_json_elements", positive_int),
    Key("max_json_depth", positive_int),
    Key("metrics_cache_s", seconds(allow_zero=True)),
)


def http_section(data: Any) -> HttpConfig:
    """Parse ``[http]``; unknown keys and wrong types are ConfigErrors naming the key."""
    return HttpConfig(**parse_table("http", data, KEYS))
