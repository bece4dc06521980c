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
    max_receive_bytes_in_flight = 268435456   # bytes of request messages (64 KiB and more)
                                      # received and held until answered; beyond:
                                      # RESOURCE_EXHAUSTED (>= max_message_bytes)
    max_connections = 1024            # connections held at once (also kept below the
                                      # open-files limit, which starts raised to its hard limit)
    connection_idle_s = 300           # a connection without calls this long is closed (0: never)
    handshake_timeout_s = 10          # a connection that does not finish HTTP/2 setup is closed
    request_arrival_s = 10            # a call whose request message has not arrived this long
                                      # after a handler took it up is cancelled
    deadline_floor_ms = 2             # a call arriving with less deadline left than this, or
                                      # than the recent time to serve a call, is answered
                                      # DEADLINE_EXCEEDED at once (never takes a slot)
    max_concurrent_streams = 0        # calls and streams open at once on one connection (HTTP/2
                                      # setting: a client queues the rest itself; 0: unset).
                                      # 16 holds a flood from one connection (docs/security.md)
    repository_control = false        # true: KServe RepositoryModelLoad/Unload are allowed on
                                      # the inference port, WITHOUT authentication (as Triton)
    log_control = false               # true: the logging extension (LogSettings, /v2/logging)
                                      # may change the log settings (reading them is open)
    tcp_shared_memory = false         # true: system shared memory over TCP too (any local user
                                      # may call there; callers taken as the agent's user)
    shared_memory_regions_per_user = 32   # regions whose objects one user owns (64 in all)
    infer_lane = "queue"              # ModelInfer's calls taken from a gRPC completion queue
                                      # of their own by one thread, no hand-off before the
                                      # handler ("threads": grpcio's handler threads;
                                      # docs/performance.md, issue 29)

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
    memory_limit_mib = 512            # a runtime process (with what it starts) is killed past
                                      # this RSS (default: the memory budget, else half the RAM)
    # threads <= the usable cores; instances, openvino_streams and instances x threads <= 8 per
    # core (edge_agent/config/device_bounds.py): more is refused, in agent.toml and live

    [agent]
    memory_budget_mib = 2048          # loaded versions' memory stays within it (default: none)

    [response_cache]                  # one agent-wide budget, least recently used evicted
    size_mib = 0                      # 0 (the default): no response cache at all

    [agent]
    max_concurrent_executions = 0     # backend executions at once, all models (0: core count)
    max_typed_input_mib = 256         # memory of typed-contents / JSON-data inputs in flight,
                                      # decoded (both protocols); beyond: RESOURCE_EXHAUSTED/429

    [http]                            # KServe v2 HTTP/REST + Prometheus /metrics (docs/http.md)
    listen = "127.0.0.1:8000"         # off unless set (or --http); a bare port means 127.0.0.1
    max_body_bytes = 67108864         # larger request bodies: 413, never read
    max_connections = 64              # beyond: 503 and the connection closed
    idle_timeout_s = 30               # a silent connection is closed
    metrics = true                    # /metrics on the same port
    shared_memory = false             # true: system shared memory over HTTP (TCP: any local
                                      # user may call; callers taken as the agent's user)

    [trace]                           # Triton's trace extension, OpenTelemetry spans
    otlp_endpoint = "http://127.0.0.1:4318"  # the OTLP/HTTP collector (default: none)
    trace_level = ["OFF"]             # OFF (default), TIMESTAMPS and/or TENSORS
    trace_rate = 1000                 # one request traced of every 1000
    trace_count = -1                  # traces left (-1: no limit); docs/tracing.md

    [fleet]                           # desired state through an MQTT broker (docs/fleet.md)
    broker = "mqtts://broker:8883"    # off unless set; mqtt:// only to a loopback host
    group = "store-cameras"           # the group whose signed desired state this agent follows
    agent_id = "cam-17"               # default: [management] name; ca_file, client_cert +
                                      # client_key or username + password_file: see docs

Every section is one frozen dataclass, parsed by one table-driven validator
(:mod:`edge_agent.config.fields`): [grpc] (:mod:`.grpc`), [http] (:mod:`.http`), [models],
[agent] and [response_cache] (:mod:`.models`), [trace] (:mod:`.trace`, docs/tracing.md), and
the management sections ([management], [mdns], [metrics], [registry]: :mod:`.management`, see
docs/management-api.md), [fleet] (:mod:`.fleet`, docs/fleet.md). Unknown keys are errors, so
a typo never goes unnoticed.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.config.deploy import ManagerSettings
from edge_agent.config.fields import expect_table, non_negative_int, parse_address, string
from edge_agent.config.fleet import FleetConfig, fleet_section
from edge_agent.config.grpc import GrpcConfig, check_grpc, grpc_section
from edge_agent.config.http import HttpConfig, http_section, listen_address
from edge_agent.config.management import SECTIONS as MANAGEMENT_SECTIONS
from edge_agent.config.management import (
    DiscoveryConfig,
    ManagementConfig,
    ManagementSections,
    MetricsConfig,
    RegistrySettings,
    management_sections,
)
from edge_agent.config.models import ModelsConfig, models_section
from edge_agent.config.trace import TraceConfig, trace_section
from edge_agent.errors import ConfigError

UDS_PATH_MAX = 107  # sun_path is 108 bytes on Linux, including the NUL


@dataclass(frozen=True)
class AgentConfig:
    """Everything ``edge-agent serve`` needs, one section per domain."""

    state_dir: Path
    grpc: GrpcConfig = field(default_factory=GrpcConfig)
    """``[grpc]``: the inference listeners and their limits."""
    http: HttpConfig = field(default_factory=HttpConfig)
    """``[http]``: the KServe HTTP/REST front end and /metrics (off unless ``listen``)."""
    models: ModelsConfig = field(default_factory=ModelsConfig)
    """``[models.*]``, ``[agent]``, ``[response_cache]``: how the data plane serves."""
    management: ManagementConfig = field(default_factory=ManagementConfig)
    """``[management]``: the management API (off unless ``address``)."""
    deploy: ManagerSettings = field(default_factory=ManagerSettings)
    """``[management]``'s deploy keys: trust, retention, the watch after a deploy, profile."""
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    """``[mdns]``: the advert of the management API."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    """``[metrics]``: the metrics store and recorder."""
    registry: RegistrySettings = field(default_factory=RegistrySettings)
    """``[registry]``: where deploys by reference may pull from."""
    trace: TraceConfig = field(default_factory=TraceConfig)
    """``[trace]``: Triton's trace settings at start and the OpenTelemetry collector."""
    fleet: FleetConfig = field(default_factory=FleetConfig)
    """``[fleet]``: desired state through an MQTT broker (off unless ``broker``)."""
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


def with_management(config: AgentConfig, sections: ManagementSections) -> AgentConfig:
    """``config`` with the management-side ``sections`` (API, deploy, discovery, metrics,
    registry) in place of its own."""
    return dataclasses.replace(config, management=sections.management, deploy=sections.deploy,
                               discovery=sections.discovery, metrics=sections.metrics,
                               registry=sections.registry)


_SECTIONS = ("state_dir", "grpc", "models", "response_cache", "http", "agent", "trace", "fleet",
             *MANAGEMENT_SECTIONS)


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed agent.toml; ConfigError when it is missing or not TOML."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def load_config(path: Path | None = None, *, state_dir: Path | None = None,
                grpc_address: str | None = None, uds: Path | None = None,
                no_uds: bool = False, no_grpc: bool = False,
                max_message_bytes: int | None = None,
                management: Mapping[str, Any] | None = None,
                http_address: str | None = None,
                fleet: Mapping[str, Any] | None = None) -> AgentConfig:
    """Read ``path`` (optional) and apply the flags given (not None) on top of it.

    ``management``: the management flags (keyword arguments of
    :func:`edge_agent.config.management.management_sections`); ``http_address``: ``--http``
    (HOST:PORT, a bare port on 127.0.0.1, or "none"); ``fleet``: ``[fleet]`` keys given as
    flags (None: not given), laid over the file's table."""
    data = read_toml(path) if path is not None else {}
    for key in data:
        if key not in _SECTIONS:
            raise ConfigError(f"config key '{key}' is unknown; known keys: {list(_SECTIONS)}")
    if state_dir is None:
        if "state_dir" not in data:
            raise ConfigError("no state directory: pass --state-dir DIR or set state_dir "
                              "in agent.toml")
        state_dir = Path(string("state_dir", data["state_dir"]))
    grpc_cfg = grpc_section(data.get("grpc", {}))
    if grpc_address is not None:
        grpc_cfg = dataclasses.replace(grpc_cfg, address=parse_address(grpc_address, "--grpc"))
    if no_grpc:
        grpc_cfg = dataclasses.replace(grpc_cfg, address=None)
    if uds is not None:
        grpc_cfg = dataclasses.replace(grpc_cfg, uds=Path(uds), uds_enabled=True)
    if no_uds:
        grpc_cfg = dataclasses.replace(grpc_cfg, uds_enabled=False)
    if max_message_bytes is not None:
        grpc_cfg = dataclasses.replace(grpc_cfg, max_message_bytes=non_negative_int(
            "--max-message-bytes", max_message_bytes))
    grpc_cfg = check_grpc(grpc_cfg)
    http_cfg = http_section(data.get("http", {}))
    if http_address is not None:
        http_cfg = dataclasses.replace(http_cfg, listen=listen_address(http_address, "--http"))
    mgmt = management_sections(data, Path(path).parent if path is not None else None,
                               **dict(management or {}))
    config = with_management(AgentConfig(
        state_dir=Path(state_dir), grpc=grpc_cfg, http=http_cfg, models=models_section(data),
        trace=trace_section(data.get("trace", {})),
        fleet=fleet_section({"fleet": {**expect_table("fleet", data.get("fleet", {})), **{
            k: v for k, v in (fleet or {}).items() if v is not None}}},
            Path(path).parent if path is not None else None),
        source=Path(path) if path is not None else None), mgmt)
    uds_path = config.uds_path
    if uds_path is not None and len(str(uds_path).encode()) > UDS_PATH_MAX:
        raise ConfigError(f"config key 'grpc.uds': socket path {uds_path} is longer than "
                          f"{UDS_PATH_MAX} bytes; set a shorter grpc.uds or pass --uds PATH")
    if config.grpc.address is None and uds_path is None:
        raise ConfigError("no listener: both TCP (grpc.address) and the Unix socket are off")
    return config
