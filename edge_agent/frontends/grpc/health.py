"""The standard gRPC health service (``grpc.health.v1.Health``) over the agent's own stubs.

Check answers the status last set for a service (NOT_FOUND for a service never set). Watch is
non-blocking, like ModelStreamInfer: it sends the current status (SERVICE_UNKNOWN for a service
never set) and then each change, holding no handler thread while it waits. After
:meth:`HealthServicer.enter_graceful_shutdown` every service is NOT_SERVING and stays so.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import grpc

from edge_agent import grpc_internals
from edge_agent.frontends.grpc.generated import health_pb2, health_pb2_grpc

Status: TypeAlias = health_pb2.HealthCheckResponse.ServingStatus
Send: TypeAlias = Callable[[Any], None]

SERVING: Status = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Status = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN: Status = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthServicer(health_pb2_grpc.HealthServicer):
    """Serving status per service name ("" is the whole server), as the health service tells."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status: dict[str, Status] = {}
        self._watchers: dict[str, set[Send]] = {}
        self._shutting_down = False

    def set(self, service: str, status: Status) -> None:
        """Record ``status`` for ``service`` and tell its watchers (ignored once shutting down)."""
        with self._lock:
            if self._shutting_down:
                return
            told = self._set(service, status)
        _tell(told, status)

    def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING from now on; later :meth:`set` calls are ignored."""
        told: list[Send] = []
        with self._lock:
            if self._shutting_down:
                return
            for service in list(self._status):
                told += self._set(service, NOT_SERVING)
            self._shutting_down = True
        _tell(told, NOT_SERVING)

    def _set(self, service: str, status: Status) -> list[Send]:
        """Record ``status`` (lock held); the watchers to tell, outside the lock."""
        self._status[service] = status
        return list(self._watchers.get(service, ()))

    def Check(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> health_pb2.HealthCheckResponse:
        with self._lock:
            status = self._status.get(request.service)
        if status is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext,
              send_response_callback: Send | None = None
              ) -> Iterator[health_pb2.HealthCheckResponse] | None:
        if send_response_callback is None:  # grpcio without the non_blocking hook
            return self._watch_blocking(request.service, context)
        service, send = request.service, send_response_callback
        self._subscribe(service, send)
        context.add_callback(lambda: self._forget(service, send))
        return None

    def _subscribe(self, service: str, send: Send) -> None:
        """Send ``service``'s status now, and each change after, through ``send``."""
        with self._lock:
            _tell([send], self._status.get(service, SERVICE_UNKNOWN))
            self._watchers.setdefault(service, set()).add(send)

    def _forget(self, service: str, send: Send) -> None:
        """Stop sending to ``send`` (its stream ended)."""
        with self._lock:
            watchers = self._watchers.get(service)
            if watchers is not None:
                watchers.discard(send)
                if not watchers:
                    del self._watchers[service]

    def _watch_blocking(self, service: str, context: grpc.ServicerContext
                        ) -> Iterator[health_pb2.HealthCheckResponse]:
        """Watch on a handler thread of its own (the public API's way): the current status,
        then each change, until the client goes away."""
        changes: queue.Queue[health_pb2.HealthCheckResponse] = queue.Queue()
        send = changes.put
        self._subscribe(service, send)
        try:
            while context.is_active():
                try:
                    yield changes.get(timeout=1.0)
                except queue.Empty:
                    continue
        finally:
            self._forget(service, send)


grpc_internals.non_blocking(HealthServicer.Watch)  # Watch sends through grpc's callback


def _tell(watchers: list[Send], status: Status) -> None:
    """Send ``status`` on each Watch stream (gRPC drops a send on a stream that has ended)."""
    for send in watchers:
        send(health_pb2.HealthCheckResponse(status=status))
