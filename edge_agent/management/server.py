"""The management gRPC server on its own port: start / stop, token or mTLS on every call.

The port itself is :class:`~edge_agent.management.gate.ConnectionGate`'s (per-address caps and
deadlines for connections that have not authenticated); the gRPC server listens on the gate's
private Unix socket.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from edge_agent import grpc_internals
from edge_agent.bind import add_port
from edge_agent.config.management import ConnectionLimits
from edge_agent.management.auth import TlsFiles, TokenAuthInterceptor, server_credentials
from edge_agent.management.gate import ConnectionGate
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from edge_agent.management.servicer import ManagementServicer

MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # deploy chunks are 1 MiB


class ManagementServer:
    """Serves :class:`ManagementServicer` on ``address`` (HOST:PORT, port 0: any free port).

    ``tls``: the certificate and key to serve (the agent's own, from
    :mod:`edge_agent.management.tls`, unless configured); None serves plaintext (``--insecure``).
    With ``tls`` holding a client CA, client certificates replace the token; otherwise every
    call needs ``token`` (or the token a callable returns now: rotation without restart).
    ``limits``: what connections may do before they authenticate (the gate's).
    """

    def __init__(self, servicer: ManagementServicer, address: str, *,
                 token: str | Callable[[], str],
                 tls: TlsFiles | None = None, workers: int = 16,
                 connection_idle_s: float = 300.0,
                 limits: ConnectionLimits | None = None) -> None:
        self.servicer = servicer
        self.address = address
        self.token = token
        self.tls = tls
        self.workers = workers
        self.connection_idle_s = connection_idle_s
        self.limits = limits or ConnectionLimits()
        self.port = 0
        self.gate: ConnectionGate | None = None
        self.interceptor: TokenAuthInterceptor | None = None  # None with mTLS
        self._server: grpc.Server | None = None

    @property
    def mtls(self) -> bool:
        """True when client certificates authenticate callers."""
        return self.tls is not None and self.tls.client_ca is not None

    def start(self) -> str:
        """Bind and serve; returns HOST:PORT with the real port."""
        grpc_internals.hooks()  # checked (and logged) once per process
        gate = ConnectionGate(self.address, self.limits, tls=self.tls is not None,
                              handshake_authenticates=self.mtls)
        self.interceptor = (None if self.mtls
                            else TokenAuthInterceptor(self.token, connections=gate))
        interceptors: list[grpc.ServerInterceptor[Any, Any]] = (
            [self.interceptor] if self.interceptor is not None else [])
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="mgmt"),
            interceptors=interceptors,
            options=self._options())
        pb_grpc.add_AgentManagementServicer_to_server(self.servicer, server)
        try:
            add_port(server, f"unix:{gate.backend}", where="the management API's socket",
                     credentials=server_credentials(self.tls) if self.tls else None)
            server.start()
            port = gate.start()
        except BaseException:
            server.stop(None)
            gate.stop()
            raise
        self._server, self.gate, self.port = server, gate, port
        self.servicer.peer_of = gate.peer  # the log names the client, not the relay
        return f"{self.address.rpartition(':')[0]}:{port}"

    def _options(self) -> list[tuple[str, int]]:
        """Message limits, and the connection hygiene the gate does not do: idle
        connections are closed, and (behind the gate's own) a handshake deadline and cap."""
        handshake_ms = int((self.limits.handshake_timeout_s or 10.0) * 1000)
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_allowed_incoming_connections", self.limits.max_connections + 16),
                   ("grpc.server_handshake_timeout_ms", handshake_ms),
                   ("grpc.http2.settings_timeout", handshake_ms)]
        if self.connection_idle_s > 0:
            options.append(("grpc.max_connection_idle_ms", int(self.connection_idle_s * 1000)))
        return options

    def stop(self, grace: float = 2.0) -> None:
        """Accept no more connections, finish in-flight calls within ``grace`` seconds and
        unbind."""
        if self.gate is not None:
            self.gate.close_listener()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        if self.gate is not None:
            self.gate.stop()
            self.gate = None
