"""The management gRPC server on its own port: start / stop, token or mTLS on every call."""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from edge_agent import grpc_internals
from edge_agent.bind import add_port
from edge_agent.management.auth import TlsFiles, TokenAuthInterceptor, server_credentials
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from edge_agent.management.servicer import ManagementServicer

MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # deploy chunks are 1 MiB
MAX_CONNECTIONS = 128  # operators' consoles and scripts; far fewer than inference callers


class ManagementServer:
    """Serves :class:`ManagementServicer` on ``address`` (HOST:PORT, port 0: any free port).

    ``tls``: the certificate and key to serve (the agent's own, from
    :mod:`edge_agent.management.tls`, unless configured); None serves plaintext (``--insecure``).
    With ``tls`` holding a client CA, client certificates replace the token; otherwise every
    call needs ``token`` (or the token a callable returns now: rotation without restart).
    """

    def __init__(self, servicer: ManagementServicer, address: str, *,
                 token: str | Callable[[], str],
                 tls: TlsFiles | None = None, workers: int = 16,
                 connection_idle_s: float = 300.0, handshake_timeout_s: float = 10.0,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.servicer = servicer
        self.address = address
        self.token = token
        self.tls = tls
        self.workers = workers
        self.connection_idle_s = connection_idle_s
        self.handshake_timeout_s = handshake_timeout_s
        self.max_connections = max_connections
        self.port = 0
        self._server: grpc.Server | None = None

    @property
    def mtls(self) -> bool:
        """True when client certificates authenticate callers."""
        return self.tls is not None and self.tls.client_ca is not None

    def start(self) -> str:
        """Bind and serve; returns HOST:PORT with the real port."""
        grpc_internals.hooks()  # checked (and logged) once per process
        interceptors: list[grpc.ServerInterceptor[Any, Any]] = (
            [] if self.mtls else [TokenAuthInterceptor(self.token)])
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="mgmt"),
            interceptors=interceptors,
            options=self._options())
        pb_grpc.add_AgentManagementServicer_to_server(self.servicer, server)
        port = add_port(server, self.address, where="--management (management.address)",
                        credentials=server_credentials(self.tls) if self.tls else None)
        server.start()
        self._server, self.port = server, port
        return f"{self.address.rpartition(':')[0]}:{port}"

    def _options(self) -> list[tuple[str, int]]:
        """Message limits, and the same connection hygiene as the inference server: idle
        connections and ones that never finish the TLS/HTTP/2 handshake are closed, and the
        connections held at once are capped (descriptors stay free for the agent's files)."""
        handshake_ms = int(self.handshake_timeout_s * 1000)
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.so_reuseport", 0),
                   ("grpc.max_allowed_incoming_connections", self.max_connections),
                   ("grpc.server_handshake_timeout_ms", handshake_ms),
                   ("grpc.http2.settings_timeout", handshake_ms)]
        if self.connection_idle_s > 0:
            options.append(("grpc.max_connection_idle_ms", int(self.connection_idle_s * 1000)))
        return options

    def stop(self, grace: float = 2.0) -> None:
        """Finish in-flight calls within ``grace`` seconds and unbind."""
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
