"""Access to the management API: a bearer token (constant-time compare) or mutual TLS.

Clients send ``authorization: Bearer <token>`` metadata on every call (inside TLS unless the
agent runs with ``--insecure``; see :mod:`edge_agent.management.tls`). With mTLS configured
(``client_ca`` set), the TLS handshake already proved the client's certificate, so the token is
not asked for. A wrong or missing token ends the call with UNAUTHENTICATED before the servicer
runs, so nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from edge_agent.errors import ConfigError
from edge_agent.settings import TlsFiles
from edge_agent.state.token import tokens_equal

AUTH_HEADER = "authorization"
DENIED = ("missing or wrong management token; pass the agent's token "
          "(on the device: edge-agent token --state-dir DIR)")


__all__ = ["TlsFiles", "TokenAuthInterceptor", "bearer", "server_credentials"]


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    """gRPC server credentials; client certificates required when ``tls.client_ca`` is set."""
    try:
        cert, key = tls.cert.read_bytes(), tls.key.read_bytes()
        ca = tls.client_ca.read_bytes() if tls.client_ca else None
    except OSError as exc:
        raise ConfigError(f"cannot read the management TLS file {exc.filename}: "
                          f"{exc.strerror}") from None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None)


def bearer(token: str) -> tuple[tuple[str, str]]:
    """Call metadata carrying ``token``."""
    return ((AUTH_HEADER, f"Bearer {token}"),)


def _presented(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == AUTH_HEADER and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer "):].strip()
    return None


def _denying(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    def deny(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, DENIED)

    kw = {"request_deserializer": handler.request_deserializer,
          "response_serializer": handler.response_serializer}
    make: Callable[..., grpc.RpcMethodHandler[Any, Any]]
    if handler.request_streaming and handler.response_streaming:
        make = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        make = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        make = grpc.unary_stream_rpc_method_handler
    else:
        make = grpc.unary_unary_rpc_method_handler
    return make(deny, **kw)


class TokenAuthInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]  # generic only in grpc-stubs
    """Refuses every call whose bearer token is not ``token`` (UNAUTHENTICATED).

    ``token`` may be a callable returning the current token (a rotated token file).
    """

    def __init__(self, token: str | Callable[[], str]) -> None:
        self._current = token if callable(token) else (lambda: token)

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        if tokens_equal(_presented(handler_call_details.invocation_metadata), self._current()):
            return handler
        return _denying(handler)
