"""The agent's configuration: ``agent.toml`` laid under command-line flags.

Example ``agent.toml``::

    state_dir = "/var/lib/edge-agent"

    [grpc]
    address = "127.0.0.1:8001"        # TCP listener; "" turns TCP off; port 0 = any free port
    uds = "/run/edge-agent/inference.sock"   # default: STATE_DIR/run/inference.sock
    uds_enabled = true
    max_message_bytes = 67108864
    workers = 8                       # handler threads; 4 calls admitted per thread, the rest
                                      # refused with RESOURCE_EXHAUSTED
    max_streams = 64                  # ModelStreamInfer streams open at once, in total
    max_streams_per_peer = 16         # ... per caller address (every local TCP caller is one
                                      # peer, and so is the Unix socket)
    stream_first_message_s = 10       # a stream that sends nothing this long is closed
    stream_idle_s = 60                # a stream with nothing to do this long is closed
    max_response_bytes = 268435456    # bytes of responses in flight; beyond: RESOURCE_EXHAUSTED
    max_connections = 1024            # connections held at once (also kept below the
                                      # open-files limit, which starts raised to its hard limit)
    connection_idle_s = 300           # a connection without calls this long is closed (0: never)
    handshake_timeout_s = 10          # a connection that does not finish HTTP/2 setup is closed
    request_arrival_s = 10            # a call whose request message has not arrived this long
                                      # after a handler took it up is cancelled
    repository_control = false        # true: KServe RepositoryModelLoad/Unload are allowed on
                                      # the inference port, WITHOUT authentication (as Triton)

    [models."*"]                      # every model (a model's own section wins key by key)
    isolation = "process"

    [models.mlp]                      # per-model overrides of the bundle's batching
    max_queue_delay_us = 500
    instances = 2
    max_queue_size = 64
    default_timeout_us = 0
    execution_timeout_ms = 60000      # a hung backend run is cancelled after this (0: never)
    isolation = "auto"                # "process": runtime in processes of its own (a hang or
                                      # crash is killed and restarted); "thread": in the agent;
                                      # "auto": process for OpenVINO/TensorRT, thread for ORT
    response_cache = false            # true: repeated requests are answered from the
                                      # response cache (needs [response_cache] size_mib > 0)
    openvino_hint = "LATENCY"         # OpenVINO only: LATENCY, THROUGHPUT or
                                      # CUMULATIVE_THROUGHPUT (default: the bundle's)
    openvino_streams = 2              # OpenVINO only (default: one stream per instance)
    priority = 10                     # 1 is the highest: runs first when executions wait for
                                      # [agent] max_concurrent_executions (default 10)

    load = "eager"                    # "on-demand": listed, loaded by the first request
    load_timeout_ms = 30000           # how long a request waits for an on-demand load
    idle_unload_s = 0                 # unload after this long unused (0: never)
    pinned = false                    # true: never unloaded (idle or to make room)
    version_policy = "active"         # KServe RepositoryModelLoad loads: "active", "all",
                                      # "latest N", "specific V,V"

    [agent]
    memory_budget_mib = 2048          # loaded versions' memory stays within it (default: none)

    [response_cache]                  # one agent-wide budget, least recently used evicted
    size_mib = 0                      # 0 (the default): no response cache at all

    [agent]
    max_concurrent_executions = 0     # backend executions at once, all models (0: core count)

    [http]                            # KServe v2 HTTP/REST + Prometheus /metrics (docs/http.md)
    listen = "127.0.0.1:8000"         # off unless set (or --http); a bare port means 127.0.0.1
    max_body_bytes = 67108864         # larger request bodies: 413, never read
    max_connections = 64              # beyond: 503 and the connection closed
    idle_timeout_s = 30               # a silent connection is closed
    metrics = true                    # /metrics on the same port

Every section is one frozen dataclass. The management sections ([management], [mdns],
[metrics]) are parsed by :mod:`edge_agent.management.options` into ``AgentConfig.management``
(see docs/management-api.md). Unknown keys are errors, so a typo
never goes unnoticed.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.core.gate import MAX_PRIORITY_VALUE
from edge_agent.core.overrides import LOAD_MODES, ModelOverrides, parse_version_policy
from edge_agent.errors import ConfigError
from edge_agent.http.options import HttpConfig, http_section, listen_address
from edge_agent.management.options import SECTIONS as MANAGEMENT_SECTIONS
from edge_agent.management.options import management_options
from edge_agent.settings import (
    ISOLATION_MODES,
    RESPONSE_CACHE_UNIT,
    ManagementOptions,
    parse_address,
)

DEFAULT_GRPC_ADDRESS = "127.0.0.1:8001"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
OPENVINO_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
UDS_PATH_MAX = 107  # sun_path is 108 bytes on Linux, including the NUL


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
    max_streams: int = 64
    max_streams_per_peer: int = 16
    stream_first_message_s: float = 10.0
    stream_idle_s: float = 60.0
    max_response_bytes: int = 256 * 1024 * 1024
    max_connections: int = 1024
    connection_idle_s: float = 300.0
    handshake_timeout_s: float = 10.0
    request_arrival_s: float = 10.0


@dataclass(frozen=True)
class AgentConfig:
    """Everything ``edge-agent serve`` needs."""

    state_dir: Path
    grpc: GrpcConfig = field(default_factory=GrpcConfig)
    models: Mapping[str, ModelOverrides] = field(default_factory=dict)
    model_defaults: ModelOverrides = field(default_factory=ModelOverrides)
    """``[models."*"]``: settings for every model; a model's own section wins key by key."""
    management: ManagementOptions = field(default_factory=ManagementOptions)
    response_cache_bytes: int = 0
    """``[response_cache] size_mib`` in bytes: the response cache's budget (0: no cache)."""
    http: HttpConfig = field(default_factory=HttpConfig)
    """``[http]``: the KServe HTTP/REST front end and /metrics (off unless ``listen``)."""
    max_concurrent_executions: int = 0
    """``[agent] max_concurrent_executions``: backend executions at once (0: the core count)."""
    memory_budget_bytes: int | None = None
    """``[agent] memory_budget_mib`` in bytes: the loaded versions' memory stays within it
    (None, the default: no budget)."""
    source: Path | None = None  # the agent.toml read (SIGHUP re-reads it)

    @property
    def models_dir(self) -> Path:
        """Where model versions live: ``STATE_DIR/models/NAME/VERSION/``."""
        return self.state_dir / "models"

    @property
    def uds_path(self) -> Path | None:
        """The Unix socket path, or None when the socket is off."""
        if not self.grpc.uds_enabled:
            return None
        return self.grpc.uds or self.state_dir / "run" / "inference.sock"


def _check_type(key: str, value: Any, expected: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) and expected in (int, (int,)):
        raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
    if not isinstance(value, expected):
        names = (expected,) if isinstance(expected, type) else expected
        want = " or ".join(t.__name__ for t in names)
        raise ConfigError(f"config key '{key}': expected {want}, got {value!r}")
    return value


def _non_negative(key: str, value: Any) -> int:
    _check_type(key, value, int)
    if value < 0:
        raise ConfigError(f"config key '{key}': must be >= 0, got {value}")
    return int(value)


_SECONDS_KEYS = ("stream_first_message_s", "stream_idle_s", "connection_idle_s",
                 "handshake_timeout_s", "request_arrival_s")


def _seconds(key: str, value: Any, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"config key '{key}': expected seconds (a number), got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"config key '{key}': must be > 0 seconds, got {value}")
    return float(value)


def _grpc_section(data: Mapping[str, Any], base: GrpcConfig) -> GrpcConfig:
    known = {f.name for f in dataclasses.fields(GrpcConfig)}
    kw: dict[str, Any] = {}
    for key, value in data.items():
        full = f"grpc.{key}"
        if key not in known:
            raise ConfigError(f"config key '{full}' is unknown; known keys: {sorted(known)}")
        if key == "address":
            kw[key] = parse_address(_check_type(full, value, str), f"config key '{full}'")
        elif key == "uds":
            kw[key] = Path(_check_type(full, value, str)) if value else None
        elif key in ("uds_enabled", "repository_control"):
            kw[key] = _check_type(full, value, bool)
        elif key in ("max_message_bytes", "workers", "uds_mode", "max_streams",
                     "max_streams_per_peer", "max_response_bytes", "max_connections"):
            kw[key] = _non_negative(full, value)
            if key != "uds_mode" and kw[key] == 0:
                raise ConfigError(f"config key '{full}': must be > 0")
        elif key in _SECONDS_KEYS:
            kw[key] = _seconds(full, value, allow_zero=key == "connection_idle_s")
    return dataclasses.replace(base, **kw)


_OVERRIDE_INTS = ("max_batch_size", "max_queue_delay_us", "instances", "threads",
                  "max_queue_size", "default_timeout_us", "default_version",
                  "execution_timeout_ms", "openvino_streams", "priority")


def _model_section(name: str, data: Mapping[str, Any]) -> ModelOverrides:
    prefix = f"models.{name}"
    _check_type(prefix, data, dict)
    known = {f.name for f in dataclasses.fields(ModelOverrides)}
    kw: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}.{key}"
        if key not in known:
            raise ConfigError(f"config key '{full}' is unknown; known keys: {sorted(known)}")
        if key in _OVERRIDE_INTS:
            kw[key] = _non_negative(full, value)
        elif key == "preferred_batch_sizes":
            _check_type(full, value, list)
            kw[key] = tuple(_non_negative(full, v) for v in value)
        elif key in ("allow_timeout_override", "warmup", "response_cache", "pinned"):
            kw[key] = _check_type(full, value, bool)
        elif key == "load_timeout_ms":
            kw[key] = _non_negative(full, value)
        elif key == "idle_unload_s":
            kw[key] = _seconds(full, value, allow_zero=True) or None
        else:
            kw[key] = _check_type(full, value, str)
    if kw.get("isolation", "auto") not in ISOLATION_MODES:
        raise ConfigError(f"config key '{prefix}.isolation': {kw['isolation']!r} is not one of "
                          f"{', '.join(ISOLATION_MODES)}")
    hint = kw.get("openvino_hint")
    if hint is not None and hint.upper() not in OPENVINO_HINTS:
        raise ConfigError(f"config key '{prefix}.openvino_hint': {hint!r} is not one of "
                          f"{', '.join(OPENVINO_HINTS)}")
    if hint is not None:
        kw["openvino_hint"] = hint.upper()
    if kw.get("openvino_streams") == 0:
        raise ConfigError(f"config key '{prefix}.openvino_streams': must be >= 1")
    if kw.get("load", "eager") not in LOAD_MODES:
        raise ConfigError(f"config key '{prefix}.load': {kw['load']!r} is not one of "
                          f"{', '.join(repr(m) for m in LOAD_MODES)}")
    try:
        parse_version_policy(kw.get("version_policy", "active"))
    except ValueError as exc:
        raise ConfigError(f"config key '{prefix}.version_policy': {exc}") from None
    if kw.get("instances") == 0:
        raise ConfigError(f"config key '{prefix}.instances': must be >= 1")
    if kw.get("priority") == 0 or kw.get("priority", 1) > MAX_PRIORITY_VALUE:
        raise ConfigError(f"config key '{prefix}.priority': must be between 1 (the highest) "
                          f"and {MAX_PRIORITY_VALUE}")
    return ModelOverrides(**kw)


def model_overrides(name: str, data: Mapping[str, Any]) -> ModelOverrides:
    """One ``[models.NAME]`` section checked exactly as agent.toml is (live settings use it)."""
    return _model_section(name, data)


_SECTIONS = ("state_dir", "grpc", "models", "response_cache", "http", "agent",
             *MANAGEMENT_SECTIONS)
_AGENT_KEYS = ("max_concurrent_executions", "memory_budget_mib")


def _agent_section(data: Mapping[str, Any]) -> tuple[int, int | None]:
    """``[agent]``: (max_concurrent_executions, the memory budget in bytes or None)."""
    for key in data:
        if key not in _AGENT_KEYS:
            raise ConfigError(f"config key 'agent.{key}' is unknown; known keys: "
                              f"{list(_AGENT_KEYS)}")
    executions = _non_negative("agent.max_concurrent_executions",
                               data.get("max_concurrent_executions", 0))
    value = data.get("memory_budget_mib")
    if value is None:
        return executions, None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"config key 'agent.memory_budget_mib': expected a number of MiB "
                          f"> 0, got {value!r}")
    return executions, int(value * (1 << 20))


def _response_cache_bytes(data: Mapping[str, Any]) -> int:
    for key in data:
        if key != "size_mib":
            raise ConfigError(f"config key 'response_cache.{key}' is unknown; known keys: "
                              "['size_mib']")
    value = data.get("size_mib", 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"config key 'response_cache.size_mib': expected a number of MiB "
                          f">= 0, got {value!r}")
    return int(value * RESPONSE_CACHE_UNIT)


def load_config(path: Path | None = None, *, state_dir: Path | None = None,
                grpc_address: str | None = None, uds: Path | None = None,
                no_uds: bool = False, no_grpc: bool = False,
                max_message_bytes: int | None = None,
                management: Mapping[str, Any] | None = None,
                http_address: str | None = None) -> AgentConfig:
    """Read ``path`` (optional) and apply the flags given (not None) on top of it.

    ``management``: the management flags (keyword arguments of
    :func:`edge_agent.management.options.management_options`); ``http_address``: ``--http``
    (HOST:PORT, a bare port on 127.0.0.1, or "none")."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    for key in data:
        if key not in _SECTIONS:
            raise ConfigError(f"config key '{key}' is unknown; known keys: {list(_SECTIONS)}")
    if state_dir is None:
        if "state_dir" not in data:
            raise ConfigError("no state directory: pass --state-dir DIR or set state_dir "
                              "in agent.toml")
        state_dir = Path(_check_type("state_dir", data["state_dir"], str))
    grpc_cfg = _grpc_section(_check_type("grpc", data.get("grpc", {}), dict), GrpcConfig())
    if grpc_address is not None:
        grpc_cfg = dataclasses.replace(grpc_cfg, address=parse_address(grpc_address, "--grpc"))
    if no_grpc:
        grpc_cfg = dataclasses.replace(grpc_cfg, address=None)
    if uds is not None:
        grpc_cfg = dataclasses.replace(grpc_cfg, uds=Path(uds), uds_enabled=True)
    if no_uds:
        grpc_cfg = dataclasses.replace(grpc_cfg, uds_enabled=False)
    if max_message_bytes is not None:
        grpc_cfg = dataclasses.replace(
            grpc_cfg, max_message_bytes=_non_negative("--max-message-bytes", max_message_bytes))
    sections = dict(_check_type("models", data.get("models", {}), dict))
    every = _check_type('models."*"', sections.pop("*", {}), dict)
    if "default_version" in every:
        raise ConfigError('config key \'models."*".default_version\': a default version is '
                          "chosen per model; set it in the model's own section")
    model_defaults = _model_section("*", every)
    models = {str(name): _model_section(str(name), {**every, **_check_type(
        f"models.{name}", section, dict)}) for name, section in sections.items()}
    http_cfg = http_section(_check_type("http", data.get("http", {}), dict))
    if http_address is not None:
        http_cfg = dataclasses.replace(http_cfg, listen=listen_address(http_address, "--http"))
    mgmt = management_options(data, Path(path).parent if path is not None else None,
                              **dict(management or {}))
    agent_section = _agent_section(_check_type("agent", data.get("agent", {}), dict))
    config = AgentConfig(state_dir=Path(state_dir), grpc=grpc_cfg, models=models,
                         model_defaults=model_defaults,
                         response_cache_bytes=_response_cache_bytes(_check_type(
                             "response_cache", data.get("response_cache", {}), dict)),
                         max_concurrent_executions=agent_section[0],
                         memory_budget_bytes=agent_section[1],
                         management=mgmt, http=http_cfg,
                         source=Path(path) if path is not None else None)
    uds_path = config.uds_path
    if uds_path is not None and len(str(uds_path).encode()) > UDS_PATH_MAX:
        raise ConfigError(f"config key 'grpc.uds': socket path {uds_path} is longer than "
                          f"{UDS_PATH_MAX} bytes; set a shorter grpc.uds or pass --uds PATH")
    if config.grpc.address is None and uds_path is None:
        raise ConfigError("no listener: both TCP (grpc.address) and the Unix socket are off")
    return config
