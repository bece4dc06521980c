"""``[grpc]``: the inference listeners (TCP and the Unix socket) and their abuse limits."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.config.fields import (
    Key,
    address,
    boolean,
    non_negative_int,
    one_of,
    parse_table,
    positive_int,
    seconds,
    string,
)
from edge_agent.errors import ConfigError

DEFAULT_GRPC_ADDRESS = "127.0.0.1:8001"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
INFER_LANES = ("threads", "queue")
"""How ModelInfer's calls reach a handler: grpcio's handler threads, or the inference lane
(edge_agent.frontends.grpc.infer_lane)."""


@dataclass(frozen=True)
class GrpcConfig:
    """The inference listeners: TCP (``address`` or None) and the Unix socket."""

    address: str | None = DEFAULT_GRPC_ADDRESS
    uds: Path | None = None  # None: STATE_DIR/run/inference.sock
    uds_enabled: bool = True
    uds_mode: int = 0o660
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    workers: int = 8  # handler threads; fewer cost less CPU per request (docs/performance.md)
    repository_control: bool = False  # KServe RepositoryModelLoad/Unload (unauthenticated)
    log_control: bool = False  # the logging extension may change the log settings
    max_streams: int = 64
    max_streams_per_peer: int = 16
    stream_first_message_s: float = 10.0
    stream_idle_s: float = 60.0
    max_response_bytes: int = 256 * 1024 * 1024
    max_receive_bytes_in_flight: int = 256 * 1024 * 1024  # request messages held (>= 64 KiB)
    max_connections: int = 1024
    connection_idle_s: float = 300.0
    handshake_timeout_s: float = 10.0
    request_arrival_s: float = 10.0
    deadline_floor_ms: int = 2  # calls with less deadline left are shed (DEADLINE_EXCEEDED)
    max_concurrent_streams: int = 0  # calls and streams open at once per connection (0: unset)
    tcp_shared_memory: bool = False  # system shared memory over TCP (any local user may call)
    shared_memory_regions_per_user: int = 32  # regions whose objects one user owns
    infer_lane: str = "queue"  # "threads": ModelInfer on grpcio's handler threads


def _uds(key: str, value: Any) -> Path | None:
    return Path(string(key, value)) if value else None


KEYS = (
    Key("address", address("127.0.0.1:8001")),
    Key("uds", _uds),
    Key("uds_enabled", boolean),
    Key("repository_control", boolean),
    Key("tcp_shared_memory", boolean),
    Key("log_control", boolean),
    Key("uds_mode", non_negative_int),
    Key("deadline_floor_ms", non_negative_int),
    Key("max_concurrent_streams", non_negative_int),
    Key("infer_lane", one_of(INFER_LANES)),
    *(Key(name, positive_int) for name in (
        "max_message_bytes", "workers", "max_streams", "max_streams_per_peer",
        "max_response_bytes", "max_receive_bytes_in_flight", "max_connections",
        "shared_memory_regions_per_user")),
    *(Key(name, seconds(allow_zero=False)) for name in (
        "stream_first_message_s", "stream_idle_s", "handshake_timeout_s",
        "request_arrival_s")),
    Key("connection_idle_s", seconds(allow_zero=True)),
)


def grpc_section(data: Any) -> GrpcConfig:
    """Parse ``[grpc]``."""
    return dataclasses.replace(GrpcConfig(), **parse_table("grpc", data, KEYS))


def check_grpc(cfg: GrpcConfig) -> GrpcConfig:
    """``cfg`` once its keys agree with each other (flags applied), else a ConfigError."""
    if cfg.max_receive_bytes_in_flight < cfg.max_message_bytes:
        raise ConfigError(
            f"config key 'grpc.max_receive_bytes_in_flight': {cfg.max_receive_bytes_in_flight} "
            f"is less than grpc.max_message_bytes ({cfg.max_message_bytes}): a message of the "
            "largest size allowed would always be refused; raise it or lower max_message_bytes")
    return cfg
