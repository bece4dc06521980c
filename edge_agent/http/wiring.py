"""Start the HTTP front end for a running agent (the one registration in ``run_agent``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from edge_agent.http.routes import KServeRoutes
from edge_agent.http.server import HttpFrontEnd

if TYPE_CHECKING:
    from edge_agent.config import AgentConfig
    from edge_agent.management.runtime import AgentRuntime
    from edge_agent.server import AgentServer


def start_http(config: AgentConfig, server: AgentServer,
               runtime: AgentRuntime) -> HttpFrontEnd | None:
    """Serve KServe v2 REST (and ``/metrics`` unless ``[http] metrics = false``) from the data
    plane ``server`` serves, with its repository control and shared memory regions; None when
    ``[http] listen`` is not set."""
    if config.http.listen is None:
        return None
    routes = KServeRoutes(server.dataplane, server.model_control, server.shared_memory)
    page = None
    if config.http.metrics:
        from edge_agent.http.prometheus import AgentCollector, MetricsPage, VersionLike

        plane = runtime.dataplane
        versions: Callable[[], Sequence[VersionLike]] | None = None
        if runtime.manager is not None:
            versions = runtime.manager.versions
        page = MetricsPage(AgentCollector(
            server.dataplane, versions=versions,
            history=runtime.store, recorder=runtime.recorder,
            cache=plane is not None and plane.response_cache is not None))
    front = HttpFrontEnd(config.http, routes, page)
    try:
        front.start()
    except BaseException:
        if page is not None:
            page.close()
        raise
    return front
