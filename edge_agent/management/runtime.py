"""One running agent: data plane, model manager, metrics, management server, mDNS, systemd.

:class:`AgentRuntime` wires the libraries together;
:func:`edge_agent.management.agent_main.run_agent` drives it::

    runtime = AgentRuntime(config, options)
    runtime.start_core()                 # state dir lock, state store, token, metrics, data
                                         # plane, manager
    ...                                  # the inference server binds here (it needs the plane)
    runtime.start_models()               # crash recovery + load the active versions
    runtime.start_management(inference_address="127.0.0.1:8001")   # gRPC + mDNS
    ...
    runtime.stop()                       # reverse order; safe after a partial start
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from edge_agent import log_ring
from edge_agent.config import AgentConfig
from edge_agent.core.dataplane import DataPlane
from edge_agent.management.identity import AgentIdentity, load_or_create_agent_id
from edge_agent.management.server import ManagementServer
from edge_agent.management.servicer import ManagementServicer
from edge_agent.management.tls import fingerprint, load_or_create
from edge_agent.manager.manager import ManagerSettings, ModelManager
from edge_agent.manager.pause import hooks_from_environment
from edge_agent.metrics import MetricsRecorder, MetricsStore, SystemSampler
from edge_agent.settings import ManagementOptions, TlsFiles
from edge_agent.state import StateStore, TokenFile
from edge_agent.state.lock import StateLock, claim_state_dir

if TYPE_CHECKING:
    from edge_agent.discovery import Advertiser, AgentAdvert

log = logging.getLogger(__name__)
T = TypeVar("T")
# what ModelManager.start reports when it takes in versions installed offline (add-bundle)
_ROUTINE_NOTES = ("registered ", "activated ")

__all__ = ["AgentRuntime", "ManagementOptions", "manager_settings"]


def manager_settings(options: ManagementOptions, drain_timeout_s: float = 30.0) -> ManagerSettings:
    """The model manager's part of the management ``options``."""
    return ManagerSettings(
        trusted_keys=options.trusted_keys, allow_unsigned=options.allow_unsigned,
        keep_versions=options.keep_versions, watch_window_s=options.watch_window_s,
        error_threshold=options.error_threshold, min_requests=options.min_requests,
        drain_timeout_s=drain_timeout_s, profile=options.profile)


class _LoopThread:
    """An asyncio loop on a daemon thread (zeroconf's AsyncZeroconf lives here)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="edge-mdns",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 15.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


class AgentRuntime:
    """Everything one agent process runs besides the inference gRPC server."""

    def __init__(self, config: AgentConfig, options: ManagementOptions, *,
                 drain_timeout_s: float = 30.0) -> None:
        self.config = config  # the data plane's settings (per-model, cache, gate, budget)
        self.state_dir = Path(config.state_dir)
        self.options = options
        self.drain_timeout_s = drain_timeout_s
        self.store: StateStore | None = None
        self.metrics: MetricsStore | None = None
        self.recorder: MetricsRecorder | None = None
        self.dataplane: DataPlane | None = None
        self.manager: ModelManager | None = None
        self.management: ManagementServer | None = None
        self.management_address: str | None = None
        self.identity: AgentIdentity | None = None
        self._token_file: TokenFile | None = None
        self._state_lock: StateLock | None = None
        self._advertiser: Advertiser | None = None
        self._loop: _LoopThread | None = None
        self._inference_port = 0
        self.fingerprint = ""  # of the management certificate ("" while plaintext or off)

    @property
    def token(self) -> str:
        """The management token callers must present now (it follows ``token --rotate``)."""
        return self._token_file.current() if self._token_file is not None else ""

    # -- start ---------------------------------------------------------------------------------
    def start_core(self) -> DataPlane:
        """Lock the state directory (creating it, 0700), then open the state store, the token,
        the metrics; build the (empty) data plane and the model manager (nothing loaded until
        :meth:`start_models`).

        The lock comes first: a second agent on the same directory stops here, before any
        recovery or write (StateDirInUseError names the holder's PID).
        """
        log_ring.install()  # from the start: `edge-console logs` shows the models loading
        self._state_lock = claim_state_dir(self.state_dir, role="serve")
        self.store = StateStore.open(self.state_dir)
        self._token_file = TokenFile(self.state_dir)
        if self.options.metrics:
            self.metrics = MetricsStore.open(self.state_dir)
            self.recorder = MetricsRecorder(self.metrics, system=SystemSampler(self.state_dir))
            self.recorder.start()
        cfg = self.config
        self.dataplane = DataPlane(self.state_dir, observer=self.recorder,
                                   overrides=cfg.models, default_overrides=cfg.model_defaults,
                                   autoload=False, drain_timeout_s=self.drain_timeout_s,
                                   response_cache_bytes=cfg.response_cache_bytes,
                                   max_concurrent_executions=cfg.max_concurrent_executions,
                                   memory_budget_bytes=cfg.memory_budget_bytes)
        self.manager = ModelManager(self.dataplane, self.store,
                                    manager_settings(self.options, self.drain_timeout_s),
                                    step_hooks=hooks_from_environment(self.state_dir))
        return self.dataplane

    def start_models(self) -> list[str]:
        """Recover from an interrupted deploy and load the active versions."""
        assert self.manager is not None
        notes = self.manager.start()
        for note in notes:  # repairs are warnings; taking in versions found on disk is routine
            routine = note.startswith(_ROUTINE_NOTES)
            log.log(logging.INFO if routine else logging.WARNING, "start-up: %s", note)
        return notes

    def start_management(self, inference_address: str = "") -> str | None:
        """Serve the management API and advertise it over mDNS; returns HOST:PORT or None."""
        assert self.manager is not None
        self.identity = AgentIdentity(agent_id=load_or_create_agent_id(self.state_dir),
                                      name=self.options.name,
                                      inference_address=inference_address)
        port = inference_address.rpartition(":")[2]
        self._inference_port = int(port) if port.isdigit() else 0
        if self.options.address is None:
            return None
        from edge_agent.management.diagnostics import Diagnostics

        diagnostics = Diagnostics(self.state_dir, log_ring.install(), self.metrics)
        servicer = ManagementServicer(self.manager, self.identity, metrics=self.metrics,
                                      recorder=self.recorder, on_change=self._advert_changed,
                                      diagnostics=diagnostics,
                                      registry=self.options.registry)
        tls = self._server_tls()
        self.fingerprint = fingerprint(tls.cert.read_bytes()) if tls is not None else ""
        self.management = ManagementServer(servicer, self.options.address,
                                           token=self._token_file.current
                                           if self._token_file else "",
                                           tls=tls,
                                           connection_idle_s=self.options.connection_idle_s,
                                           handshake_timeout_s=self.options.handshake_timeout_s)
        self.management_address = self.management.start()
        if not self.options.trusted_keys and not self.options.allow_unsigned:
            log.warning("no trusted public key (--trust): every deploy will be refused until "
                        "one is configured (or --allow-unsigned for development)")
        if self.options.mdns:
            self._start_mdns()
        return self.management_address

    def _server_tls(self) -> TlsFiles | None:
        """The management TLS files: none (--insecure), the configured ones, or the agent's
        self-signed identity in the state dir (created on first start)."""
        if self.options.insecure:
            log.warning("management API in PLAINTEXT (--insecure): anyone on the network who "
                        "sees a call can take the token")
            return None
        if self.options.tls is not None:
            return self.options.tls
        from edge_agent.discovery import advertised_addresses

        host = (self.options.address or "").rpartition(":")[0].strip("[]")
        hosts = [*advertised_addresses(self.options.mdns_interfaces or None),
                 *([host] if host and host not in ("0.0.0.0", "::") else [])]
        cert, key = load_or_create(self.state_dir, hosts)
        return TlsFiles(cert=cert, key=key, client_ca=self.options.client_ca)

    def _advert(self) -> AgentAdvert:
        from edge_agent.discovery import AgentAdvert
        from edge_agent.manager.manager import names_of

        assert self.identity is not None and self.manager is not None
        assert self.management is not None
        return AgentAdvert(id=self.identity.agent_id, name=self.identity.name,
                           arch=self.manager.device.arch, profile=self.manager.device.profile,
                           mgmt_port=self.management.port, grpc_port=self._inference_port,
                           fingerprint=self.fingerprint,
                           models=tuple(names_of(self.manager.versions())))

    def _start_mdns(self) -> None:
        from edge_agent.discovery import Advertiser

        self._loop = _LoopThread()
        interfaces = list(self.options.mdns_interfaces) or None
        advertiser = Advertiser(self._advert(), interfaces=interfaces)
        try:
            self._loop.run(advertiser.start())
        except Exception as exc:
            log.warning("mDNS advertisement failed (the agent serves anyway): %s", exc)
            return
        self._advertiser = advertiser

    def _advert_changed(self) -> None:
        if self._advertiser is not None and self._loop is not None:
            self._loop.run(self._advertiser.update(self._advert()))

    def reload_settings(self, options: ManagementOptions) -> None:
        """Apply what a config reload (SIGHUP) may change: trust, retention, watch settings and
        ``[registry]`` (the next deploy by reference uses it; a pull under way keeps its own)."""
        self.options = options
        if self.manager is not None:
            self.manager.settings = manager_settings(options, self.drain_timeout_s)
        if self.management is not None:
            self.management.servicer.registry = options.registry

    # -- stop ----------------------------------------------------------------------------------
    def stop_management(self) -> None:
        """Withdraw the mDNS advert (goodbye packets) and stop the management server."""
        if self._advertiser is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.run(self._advertiser.stop())
            self._advertiser = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self.management is not None:
            self.management.stop()
            self.management = None

    def stop(self) -> None:
        """Stop everything this runtime started (after the inference server stopped)."""
        self.stop_management()
        if self.manager is not None:
            self.manager.close()
        if self.dataplane is not None:
            self.dataplane.close()
        if self.recorder is not None:
            self.recorder.stop()
        if self.metrics is not None:
            self.metrics.close()
        if self.store is not None:
            self.store.close()
        if self._state_lock is not None:
            self._state_lock.release()
