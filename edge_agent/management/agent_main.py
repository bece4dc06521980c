"""The agent's main loop: inference server + :class:`AgentRuntime`, signals and systemd.

:func:`serve` (``edge-agent serve``) calls :func:`run_agent`. Order at start: the state dir's
lock, state, token and metrics -> inference listeners bound (health NOT_SERVING) -> crash
recovery and the active versions loaded -> management API and mDNS -> health SERVING,
``READY=1``. SIGTERM/SIGINT: ``STOPPING=1``, the advert withdrawn, in-flight requests drained,
exit 0. SIGHUP: ``reload()`` re-reads the config.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from edge_agent.config import AgentConfig
from edge_agent.core.api import DataPlaneAPI
from edge_agent.http.server import HttpFrontEnd
from edge_agent.http.wiring import start_http
from edge_agent.management.runtime import AgentRuntime, ManagementOptions
from edge_agent.server import AgentServer, BoundAddresses
from edge_agent.systemd_notify import SystemdNotifier

log = logging.getLogger(__name__)


def serve(config: AgentConfig, *, on_ready: Callable[[BoundAddresses, DataPlaneAPI], None]
          | None = None, stop_event: threading.Event | None = None, grace: float = 5.0,
          reload: Callable[[], ManagementOptions] | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT (or ``stop_event``): state, models, the inference and
    (when configured) management servers, metrics, mDNS, systemd notifications; then drain.

    ``on_ready`` gets the bound addresses (``management`` set when the API is on) and the data
    plane. ``reload`` returns fresh management options on SIGHUP.
    """

    def ready(addresses: BoundAddresses, dataplane: DataPlaneAPI, runtime: AgentRuntime) -> None:
        if on_ready is not None:
            on_ready(dataclasses.replace(addresses, management=runtime.management_address),
                     dataplane)

    return run_agent(config, config.management, on_ready=ready, stop_event=stop_event,
                     grace=grace, reload=reload)


SignalHandler = Callable[[int, FrameType | None], Any] | int | None


def run_agent(config: AgentConfig, options: ManagementOptions, *,
              on_ready: Callable[[BoundAddresses, DataPlaneAPI, AgentRuntime], None]
              | None = None,
              stop_event: threading.Event | None = None, grace: float = 5.0,
              reload: Callable[[], ManagementOptions] | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or ``stop_event``) with ``config``'s listeners and models and
    the management ``options``.

    ``on_ready(addresses, dataplane, runtime)`` runs once everything listens. ``reload``
    (optional) returns fresh options on SIGHUP.
    """
    stop = stop_event or threading.Event()
    hup = threading.Event()
    previous: dict[int, SignalHandler] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: hup.set())
    notifier = SystemdNotifier()
    runtime = AgentRuntime(config, options)
    server = None
    http: HttpFrontEnd | None = None
    try:
        notifier.status("starting: opening state and loading models")
        dataplane = runtime.start_core()
        if config.uds_path is not None:
            _socket_dir(config.uds_path.parent)
        server = AgentServer(dataplane, config, model_control=runtime.manager)
        addresses = server.start()
        http = start_http(config, server, runtime)  # KServe REST + /metrics when configured
        if http is not None:
            addresses = dataclasses.replace(addresses, http=http.address)
        runtime.start_models()
        if not stop.is_set():  # a SIGTERM during loading: never report ready
            runtime.start_management(inference_address=addresses.tcp or "")
            server.mark_serving()
            notifier.start_watchdog(healthy=dataplane.live)
            assert runtime.manager is not None
            active = [f"{v.model}:{v.version}" for v in runtime.manager.versions() if v.active]
            notifier.ready(f"serving {len(active)} model(s): {', '.join(active) or 'none'}")
            if on_ready is not None:
                on_ready(addresses, dataplane, runtime)
        while not stop.wait(0.5):
            if hup.is_set():
                hup.clear()
                _reload(runtime, reload, notifier)
        notifier.stopping("draining in-flight requests")
        log.info("shutting down: draining in-flight requests")
    finally:
        notifier.stop_watchdog()
        runtime.stop_management()
        if http is not None:
            http.stop(grace)
        if server is not None:
            server.stop(grace)
        runtime.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


def _socket_dir(directory: Path) -> None:
    """Create the Unix socket's directory 0755 (the agent runs with umask 077): the socket's
    own mode (0660) is what admits the apps of its group."""
    if directory.exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)


def _reload(runtime: AgentRuntime, reload: Callable[[], ManagementOptions] | None,
            notifier: SystemdNotifier) -> None:
    if reload is None:
        log.warning("SIGHUP: no config file to reload")
        return
    notifier.notify("RELOADING=1")
    try:
        runtime.reload_settings(reload())
        log.warning("SIGHUP: configuration reloaded (trust, retention, watch settings, "
                    "[registry])")
    except Exception as exc:  # a bad edit must not take the agent down
        log.error("SIGHUP: the configuration was not reloaded: %s", exc)
    finally:
        notifier.notify("READY=1")
