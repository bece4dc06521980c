"""The agent's gRPC server: the KServe v2 inference service plus the standard health service,
on a Unix domain socket (file mode 0660) and/or TCP (127.0.0.1 unless configured).

Sync thread-pool server: on this 2-core class of device it answered about twice as many
requests per second as grpc.aio (benchmarks/bench_server_model.py), and the data plane runs
an idle model inline on the handler thread, saving a thread hop per request.

Capacity that abusive callers cannot take (docs/security.md): unary calls are admitted by
:class:`~edge_agent.frontends.grpc.admission.AdmissionPool` (4 per handler thread, the rest refused
at once; a call whose request does not arrive within ``request_arrival_s`` is cancelled);
ModelStreamInfer is non-blocking, capped and timed out
(:mod:`edge_agent.frontends.grpc.streams`) on a pool of its own; health has its own pool and is
never refused. Connections idle for ``connection_idle_s``, or that do not finish the HTTP/2
handshake within ``handshake_timeout_s``, are closed; the number of connections is capped
below the descriptor limit (raised to the hard limit at start) so that the state and metrics
files can always be opened.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from edge_agent import grpc_internals
from edge_agent.bind import add_port
from edge_agent.config import AgentConfig
from edge_agent.core.api import DataPlaneAPI
from edge_agent.errors import ConfigError
from edge_agent.frontends.common.context import FrontendContext
from edge_agent.frontends.common.control import RepositoryControl
from edge_agent.frontends.common.typed_budget import TypedBudget
from edge_agent.frontends.grpc import handlers, infer_lane
from edge_agent.frontends.grpc.admission import (
    AdmissionPool,
    ReceiveGate,
    ResponseBudget,
    WatchedPool,
)
from edge_agent.frontends.grpc.health import NOT_SERVING, SERVING, HealthServicer
from edge_agent.frontends.grpc.received import RECEIVE_WINDOW, ReceiveBudget
from edge_agent.frontends.grpc.servicer import InferenceServicer
from edge_agent.frontends.grpc.streams import StreamLimits, StreamSessions
from edge_agent.tracing import Tracing

log = logging.getLogger(__name__)

INFERENCE_SERVICE = "inference.GRPCInferenceService"


CALLS_PER_WORKER = 4
"""Concurrent inference calls admitted per handler thread; the rest are refused."""
RESERVED_FDS = 128
"""Descriptors kept free of connections (state and metrics databases, models, pipes)."""


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, target, exc)
    return soft


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64


def connection_cap(configured: int) -> int:
    """How many connections the server may hold: ``configured``, and never so many that the
    descriptors left (half of those free now, minus :data:`RESERVED_FDS`) run out."""
    soft = raise_fd_limit()
    free = max(0, soft - _open_fds() - RESERVED_FDS)
    return max(16, min(configured, free // 2))


@dataclass(frozen=True)
class BoundAddresses:
    """Where the server listens: ``tcp`` as HOST:PORT with the real port, ``uds`` a path."""

    tcp: str | None
    uds: Path | None
    management: str | None = None  # the management API's HOST:PORT, when it is on
    http: str | None = None  # the KServe HTTP/REST front end's HOST:PORT, when it is on

    def targets(self) -> list[str]:
        """gRPC target strings a client can dial."""
        out = [f"unix:{self.uds}"] if self.uds else []
        return out + ([self.tcp] if self.tcp else [])


def _socket_in_use(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True


def _prepare_uds(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not path.is_socket():
            raise ConfigError(f"config key 'grpc.uds': {path} exists and is not a socket; "
                              "choose another path")
        if _socket_in_use(path):
            raise ConfigError(f"config key 'grpc.uds': another server is listening on {path}; "
                              "stop it or choose another path")
        path.unlink()  # stale socket of a process that died


class AgentServer:
    """One gRPC server over one data plane: ``start()``, then ``stop(grace)`` in a finally."""

    def __init__(self, dataplane: DataPlaneAPI, config: AgentConfig, *,
                 model_control: RepositoryControl | None = None,
                 context: FrontendContext | None = None) -> None:
        # what every front end (gRPC and HTTP) serves from: the HTTP front end is given this
        # same context, not this server. RepositoryModelLoad/Unload go to the model manager
        # only when the config allows it; one set of system shared memory regions for both.
        self.context = context or FrontendContext(
            dataplane, model_control if config.grpc.repository_control else None,
            typed_budget=TypedBudget(config.models.typed_input_bytes),
            tracing=Tracing(config.trace))
        self.dataplane = dataplane
        self.config = config
        self.health = HealthServicer()
        self._server: grpc.Server | None = None
        self._uds: Path | None = None
        self._pools: list[futures.ThreadPoolExecutor] = []
        self._lane: infer_lane.InferLane | None = None
        self.streams: StreamSessions | None = None
        self.received: ReceiveBudget | None = None
        """The request messages held now ([grpc] max_receive_bytes_in_flight), once started."""
        self.addresses = BoundAddresses(None, None)

    def start(self) -> BoundAddresses:
        """Bind every listener and start serving (health NOT_SERVING until mark_serving)."""
        cfg = self.config.grpc
        options = [
            ("grpc.max_receive_message_length", cfg.max_message_bytes),
            ("grpc.max_send_message_length", cfg.max_message_bytes),
            ("grpc.so_reuseport", 0),  # a second agent on the same port must fail, not share
            ("grpc.max_allowed_incoming_connections", connection_cap(cfg.max_connections)),
            ("grpc.server_handshake_timeout_ms", int(cfg.handshake_timeout_s * 1000)),
            ("grpc.http2.settings_timeout", int(cfg.handshake_timeout_s * 1000)),
            *RECEIVE_WINDOW,
        ]
        if cfg.max_concurrent_streams > 0:
            # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: a client's calls beyond it wait in the
            # client, so one connection cannot flood the calls gRPC's core holds for the
            # server's one Python thread that takes them up (whose backlog beyond 1,000 made
            # the core cancel calls of every connection at random). Off by default: a burst
            # beyond it on a new connection, before the client has the setting, is refused
            # (REFUSED_STREAM, which grpcio's clients report as UNAVAILABLE)
            options.append(("grpc.max_concurrent_streams", cfg.max_concurrent_streams))
        if cfg.connection_idle_s > 0:
            options.append(("grpc.max_connection_idle_ms", int(cfg.connection_idle_s * 1000)))
        # callers beyond CALLS_PER_WORKER per handler thread get RESOURCE_EXHAUSTED at once
        # instead of waiting, each with its request in memory, in an unbounded queue
        arrival = cfg.request_arrival_s
        # a stream holds a thread of its pool only where grpcio lacks the non-blocking hook
        streamers = 2 if grpc_internals.hooks().non_blocking else cfg.max_streams
        # unary messages received at once: their bytes bounded by max_receive_bytes_in_flight
        gate = ReceiveGate(max(1, cfg.max_receive_bytes_in_flight // cfg.max_message_bytes))
        self._pools = [AdmissionPool(cfg.workers, cfg.workers * CALLS_PER_WORKER,
                                     request_arrival_s=arrival,
                                     deadline_floor_s=cfg.deadline_floor_ms / 1000, gate=gate),
                       futures.ThreadPoolExecutor(streamers, thread_name_prefix="grpc-stream"),
                       WatchedPool(4, request_arrival_s=arrival, thread_name_prefix="grpc-health")]
        main, stream_pool, health_pool = self._pools
        server = grpc.server(main, options=options)
        self.streams = StreamSessions(StreamLimits(
            max_streams=cfg.max_streams, max_streams_per_peer=cfg.max_streams_per_peer,
            stream_first_message_s=cfg.stream_first_message_s,
            stream_idle_s=cfg.stream_idle_s))
        received = self.received = ReceiveBudget(cfg.max_receive_bytes_in_flight)
        servicer = InferenceServicer(self.context, streams=self.streams,
                                     budget=ResponseBudget(cfg.max_response_bytes),
                                     uds=self.config.uds_path,
                                     tcp_shared_memory=cfg.tcp_shared_memory,
                                     received=received)
        inference = handlers.inference_handlers(servicer, stream_pool, health_pool,
                                                self.context.typed_budget, received)
        if cfg.infer_lane == "queue" and (queue := grpc_internals.attach_queue(
                server, infer_lane.METHOD)) is not None:
            model_infer = inference.pop("ModelInfer")  # served by the lane alone
            decode, encode = model_infer.request_deserializer, model_infer.response_serializer
            assert isinstance(main, AdmissionPool) and decode is not None and encode is not None
            self._lane = infer_lane.InferLane(queue, main, grpc_internals.behavior_of(model_infer),
                                              decode, encode, gate=gate,
                                              quick=infer_lane.quick_on(self.context.dataplane),
                                              together=servicer.model_infer_together)
        handlers.register(server, INFERENCE_SERVICE, inference)
        handlers.register(server, handlers.HEALTH_SERVICE,
                          handlers.health_handlers(self.health, health_pool))
        for name in ("", INFERENCE_SERVICE):
            self.health.set(name, NOT_SERVING)
        tcp = None
        if cfg.address:
            port = add_port(server, cfg.address, where="--grpc (grpc.address)")
            tcp = f"{cfg.address.rpartition(':')[0]}:{port}"
        uds = self.config.uds_path
        if uds is not None:
            _prepare_uds(uds)
            old = os.umask(0o117)  # the socket is born 0660, never briefly world-writable
            try:
                add_port(server, f"unix:{uds}", where="--uds (grpc.uds)")
            finally:
                os.umask(old)
        server.start()
        if self._lane is not None:
            self._lane.start()
        if uds is not None:
            os.chmod(uds, cfg.uds_mode)
        self._server, self._uds = server, uds
        self.addresses = BoundAddresses(tcp, uds)
        return self.addresses

    def mark_serving(self) -> None:
        """Report SERVING on the health service (call once the models are ready)."""
        for name in ("", INFERENCE_SERVICE):
            self.health.set(name, SERVING)

    def stop(self, grace: float = 5.0) -> None:
        """Report NOT_SERVING, finish in-flight calls within ``grace`` seconds, unbind."""
        self.health.enter_graceful_shutdown()
        if self._server is not None:
            # new calls get UNAVAILABLE ("shutting down, retry") while the admitted ones finish;
            # only then does gRPC stop (calls it finds arriving at its own stop are CANCELLED,
            # which clients do not retry)
            t0 = time.monotonic()
            main = self._pools[0] if self._pools else None
            if isinstance(main, AdmissionPool):
                main.close()
                main.drain(grace)
            self._server.stop(max(grace - (time.monotonic() - t0), 0.5)).wait()
            self._server = None
        if self._lane is not None:
            self._lane.stop()
            self._lane = None
        if self.streams is not None:
            self.streams.stop()
        for pool in self._pools:
            pool.shutdown(wait=False)
        self._pools = []
        if self._uds is not None:
            with contextlib.suppress(FileNotFoundError):
                self._uds.unlink()
            self._uds = None
        self.context.tracing.close()  # the spans of the last requests exported
