"""The [grpc] abuse limits in agent.toml: read, checked, and refused with a clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.config import load_config
from edge_agent.errors import ConfigError


def _load(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "agent.toml"
    path.write_text(body)
    return load_config(path, state_dir=tmp_path / "state")


def test_limits_are_read(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "[grpc]\nmax_streams = 5\nmax_streams_per_peer = 2\n"
                          "stream_first_message_s = 1.5\nstream_idle_s = 30\n"
                          "max_response_bytes = 1024\nmax_connections = 64\n"
                          "connection_idle_s = 0\nhandshake_timeout_s = 3\n"
                          "request_arrival_s = 2\n").grpc
    assert (cfg.max_streams, cfg.max_streams_per_peer, cfg.stream_first_message_s,
            cfg.stream_idle_s, cfg.max_response_bytes, cfg.max_connections,
            cfg.connection_idle_s, cfg.handshake_timeout_s,
            cfg.request_arrival_s) == (5, 2, 1.5, 30.0, 1024, 64, 0.0, 3.0, 2.0)


@pytest.mark.parametrize(("line", "words"), [
    ("max_streams = 0", "'grpc.max_streams': must be > 0"),
    ("max_response_bytes = -1", "must be >= 0"),
    ("stream_idle_s = 0", "'grpc.stream_idle_s': must be > 0 seconds"),
    ("handshake_timeout_s = \"10\"", "expected seconds"),
    ("stream_first_message_s = true", "expected seconds"),
])
def test_bad_limits_are_refused(tmp_path: Path, line: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        _load(tmp_path, f"[grpc]\n{line}\n")


def test_management_connection_limits_are_read(tmp_path: Path) -> None:
    limits = _load(tmp_path, "[management]\nmax_connections = 64\n"
                             "max_connections_per_peer = 8\nmax_unauthenticated_per_peer = 2\n"
                             "handshake_timeout_s = 1.5\nauth_timeout_s = 0\n"
                   ).management.limits
    assert (limits.max_connections, limits.max_connections_per_peer,
            limits.max_unauthenticated_per_peer, limits.handshake_timeout_s,
            limits.auth_timeout_s) == (64, 8, 2, 1.5, 0)


@pytest.mark.parametrize(("line", "words"), [
    ("max_connections = 0", r"'management.max_connections': 0 is out of range"),
    ("max_connections_per_peer = -1", "out of range"),
    ("auth_timeout_s = -1", r"'management.auth_timeout_s': -1 is out of range"),
    ("max_unauthenticated_per_peer = 40", r"is more than 'management.max_connections_per_peer'"),
    ("max_unauthenticated_per_peer = \"8\"", "expected int"),
])
def test_bad_management_limits_are_refused(tmp_path: Path, line: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        _load(tmp_path, f"[management]\n{line}\n")
