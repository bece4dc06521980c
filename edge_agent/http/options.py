"""``[http]`` in agent.toml and ``--http``: where and how the HTTP front end listens.

A leaf module (no HTTP server, no Prometheus client), so that reading the config stays light.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edge_agent.errors import ConfigError
from edge_agent.settings import parse_address

DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class HttpConfig:
    """The HTTP front end: off (``listen`` None) unless configured."""

    listen: str | None = None
    max_body_bytes: int = 64 * 1024 * 1024
    """A request body larger than this is refused (413) before it is read."""
    max_connections: int = 64
    """Connections served at once (a thread each); beyond it: 503 and the connection closed."""
    idle_timeout_s: float = 30.0
    """A connection that sends nothing (between requests, or mid-request) this long is closed."""
    metrics: bool = True
    """Serve ``/metrics`` (Prometheus text format) on the same port."""


def listen_address(value: str, where: str) -> str | None:
    """HOST:PORT, or 127.0.0.1:PORT for a bare port; None for "", "none" or "off"."""
    text = value.strip()
    if text.isdigit():
        text = f"{DEFAULT_HOST}:{text}"
    return parse_address(text, where, example="127.0.0.1:8000")


def http_section(data: Mapping[str, Any]) -> HttpConfig:
    """Parse ``[http]``; unknown keys and wrong types are ConfigErrors naming the key."""
    known = {f.name for f in dataclasses.fields(HttpConfig)}
    kw: dict[str, Any] = {}
    for key, value in data.items():
        full = f"http.{key}"
        if key not in known:
            raise ConfigError(f"config key '{full}' is unknown; known keys: {sorted(known)}")
        if key == "listen":
            if not isinstance(value, str | int) or isinstance(value, bool):
                raise ConfigError(f"config key '{full}': expected \"HOST:PORT\" or a port, "
                                  f"got {value!r}")
            kw[key] = listen_address(str(value), f"config key '{full}'")
        elif key == "metrics":
            if not isinstance(value, bool):
                raise ConfigError(f"config key '{full}': expected true or false, got {value!r}")
            kw[key] = value
        elif key == "idle_timeout_s":
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"config key '{full}': expected seconds > 0, got {value!r}")
            kw[key] = float(value)
        else:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"config key '{full}': expected an integer > 0, "
                                  f"got {value!r}")
            kw[key] = value
    return HttpConfig(**kw)
