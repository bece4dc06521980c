"""The composition root: one :class:`Agent` builds every part of ``edge-agent serve`` from one
:class:`~edge_agent.config.AgentConfig` and owns the start and stop order.

Phases, each returning a frozen record of what it built (nothing is half-built)::

    state = open_state(config)                 # the state dir's lock, state store, token,
                                               # metrics store and recorder
    core = build_core(config, state)           # data plane (empty) + deploy manager
    ends = start_frontends(config, state, core)   # gRPC (health NOT_SERVING), HTTP + /metrics
    core.manager.start()                       # crash recovery, the active versions loaded
    mgmt = start_management(config, state, core, ends)   # management API + mDNS advert
    ends.grpc.mark_serving(); READY=1

Stop (SIGTERM/SIGINT or ``stop_event``): ``STOPPING=1``, the advert withdrawn, the
management API stopped, the front ends drained, then the core and the state, in reverse.
SIGHUP re-reads the configuration (``reload``) and applies what may change live: trust,
retention, the watch after a deploy, ``[registry]``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from edge_agent import __version__, log_ring
from edge_agent.config import AgentConfig, RegistrySettings
from edge_agent.core.dataplane import DataPlane
from edge_agent.deploy.manager import ModelManager
from edge_agent.deploy.pause import hooks_from_environment
from edge_agent.errors import AgentError, ConfigError
from edge_agent.frontends.common.context import FrontendContext
from edge_agent.frontends.common.shared_memory import SharedMemoryRegistry
from edge_agent.frontends.common.typed_budget import TypedBudget
from edge_agent.frontends.http.server import HttpFrontEnd
from edge_agent.management.identity import AgentIdentity, load_or_create_agent_id
from edge_agent.management.server import ManagementServer
from edge_agent.management.servicer import ManagementServicer
from edge_agent.management.tls import fingerprint, server_tls
from edge_agent.metrics import MetricsRecorder, MetricsStore, SystemSampler
from edge_agent.server import AgentServer, BoundAddresses
from edge_agent.state import StateStore, TokenFile
from edge_agent.state.lock import StateLock, claim_state_dir
from edge_agent.systemd_notify import SystemdNotifier
from edge_agent.tracing import Tracing

if TYPE_CHECKING:
    from edge_agent.core.api import DataPlaneAPI
    from edge_agent.discovery import AgentAdvert, BackgroundAdvertiser
    from edge_agent.fleet.member import FleetMember

log = logging.getLogger(__name__)

STOP_DEADLINE_S = 25.0
"""Seconds from a stop signal to the exit, at most (under systemd's TimeoutStopSec=30s)."""
# what ModelManager.start reports when it takes in versions installed offline (add-bundle)
_ROUTINE_NOTES = ("registered ", "activated ")

SignalHandler = Callable[[int, FrameType | None], Any] | int | None


@dataclass(frozen=True)
class StateParts:
    """Phase 1: the state directory, locked, and what lives in it."""

    lock: StateLock
    store: StateStore
    token: TokenFile
    metrics: MetricsStore | None  # None: [metrics] enabled = false
    recorder: MetricsRecorder | None

    def close(self) -> None:
        """Stop the recorder, close the stores, release the lock."""
        if self.recorder is not None:
            self.recorder.stop()
        if self.metrics is not None:
            self.metrics.close()
        self.store.close()
        self.lock.release()


@dataclass(frozen=True)
class CoreParts:
    """Phase 2: the data plane and the deploy lifecycle over it."""

    dataplane: DataPlane
    manager: ModelManager

    def close(self) -> None:
        """Stop the manager's background work, then unload every version."""
        self.manager.close()
        self.dataplane.close()


@dataclass(frozen=True)
class FrontEnds:
    """Phase 3: the inference front ends, listening."""

    grpc: AgentServer
    http: HttpFrontEnd | None  # None: [http] listen not set
    addresses: BoundAddresses

    def stop(self, grace: float) -> None:
        """Drain and unbind (HTTP first: it is the smaller one)."""
        if self.http is not None:
            self.http.stop(grace)
        self.grpc.stop(grace)


@dataclass(frozen=True)
class ManagementParts:
    """Phase 5: the management API (when ``[management] address`` is set) and its advert."""

    identity: AgentIdentity
    server: ManagementServer
    address: str
    fingerprint: str  # of the management certificate ("" while plaintext)
    advert: BackgroundAdvertiser | None  # None: mDNS off, or the advert failed

    def stop(self) -> None:
        """Withdraw the advert (goodbye packets), end the pulls under way (their partial
        files removed), then stop the server."""
        if self.advert is not None:
            self.advert.stop()
        self.server.servicer.stop_pulls()
        self.server.stop()


def open_state(config: AgentConfig) -> StateParts:
    """Lock the state directory (creating it, 0700), then open the state store, the token and
    the metrics. The lock comes first: a second agent on the same directory stops here, before
    any recovery or write (StateDirInUseError names the holder's PID)."""
    lock = claim_state_dir(config.state_dir, role="serve")
    metrics: MetricsStore | None = None
    recorder: MetricsRecorder | None = None
    try:
        store = StateStore.open(config.state_dir)
        if config.metrics.enabled:
            metrics = MetricsStore.open(config.state_dir)
            recorder = MetricsRecorder(metrics, system=SystemSampler(config.state_dir))
            recorder.start()
    except BaseException:
        if metrics is not None:
            metrics.close()
        lock.release()
        raise
    return StateParts(lock=lock, store=store, token=TokenFile(config.state_dir),
                      metrics=metrics, recorder=recorder)


def build_core(config: AgentConfig, state: StateParts) -> CoreParts:
    """The (empty) data plane and the deploy manager; nothing loads until ``manager.start``."""
    m = config.models
    dataplane = DataPlane(config.state_dir, observer=state.recorder, overrides=m.overrides,
                          default_overrides=m.defaults, autoload=False,
                          drain_timeout_s=config.deploy.drain_timeout_s,
                          response_cache_bytes=m.response_cache_bytes,
                          max_concurrent_executions=m.max_concurrent_executions,
                          memory_budget_bytes=m.memory_budget_bytes)
    try:
        manager = ModelManager(dataplane, state.store, config.deploy,
                               step_hooks=hooks_from_environment(config.state_dir))
    except BaseException:
        dataplane.close()
        raise
    return CoreParts(dataplane=dataplane, manager=manager)


def start_frontends(config: AgentConfig, state: StateParts, core: CoreParts) -> FrontEnds:
    """Bind the gRPC listeners (health NOT_SERVING) and, when configured, the HTTP front end
    (KServe REST and /metrics), both given one :class:`FrontendContext`: the same data plane,
    repository control and shared memory regions."""
    if config.uds_path is not None:
        _socket_dir(config.uds_path.parent)
    # RepositoryModelLoad/Unload (gRPC and HTTP) go to the model manager only when allowed
    context = FrontendContext(
        core.dataplane, core.manager if config.grpc.repository_control else None,
        SharedMemoryRegistry(max_per_user=config.grpc.shared_memory_regions_per_user),
        log_control=config.grpc.log_control,
        typed_budget=TypedBudget(config.models.typed_input_bytes),
        tracing=Tracing(config.trace))
    grpc = AgentServer(core.dataplane, config, context=context)
    addresses = grpc.start()
    try:
        http = _start_http(config, context, state, core)
    except BaseException:
        grpc.stop(0)
        raise
    if http is not None:
        addresses = dataclasses.replace(addresses, http=http.address)
    return FrontEnds(grpc=grpc, http=http, addresses=addresses)


def _start_http(config: AgentConfig, context: FrontendContext, state: StateParts,
                core: CoreParts) -> HttpFrontEnd | None:
    if config.http.listen is None:
        return None
    from edge_agent.frontends.http.routes import KServeRoutes

    routes = KServeRoutes(context, shared_memory=config.http.shared_memory)
    page = None
    if config.http.metrics:
        from edge_agent.frontends.http.prometheus import AgentCollector, MetricsPage

        page = MetricsPage(AgentCollector(
            core.dataplane, versions=core.manager.versions, history=state.store,
            recorder=state.recorder, cache=core.dataplane.response_cache is not None))
    front = HttpFrontEnd(config.http, routes, page)
    try:
        front.start()
    except BaseException:
        if page is not None:
            page.close()
        raise
    return front


def start_models(core: CoreParts) -> list[str]:
    """Recover from an interrupted deploy and load the active versions."""
    notes = core.manager.start()
    for note in notes:  # repairs are warnings; taking in versions found on disk is routine
        routine = note.startswith(_ROUTINE_NOTES)
        log.log(logging.INFO if routine else logging.WARNING, "start-up: %s", note)
    return notes


def start_management(config: AgentConfig, state: StateParts, core: CoreParts,
                     ends: FrontEnds) -> ManagementParts | None:
    """Serve the management API and advertise it over mDNS; None when it is off."""
    options = config.management
    if options.address is None:
        return None
    from edge_agent.management.diagnostics import Diagnostics

    identity = AgentIdentity(agent_id=load_or_create_agent_id(config.state_dir),
                             name=options.name, inference_address=ends.addresses.tcp or "")
    link = _AdvertLink()
    servicer = ManagementServicer(core.manager, identity, metrics=state.metrics,
                                  recorder=state.recorder, on_change=link.changed,
                                  diagnostics=Diagnostics(config.state_dir, log_ring.install(),
                                                          state.metrics),
                                  registry=config.registry)
    tls = server_tls(options, config.discovery.interfaces, config.state_dir)
    server = ManagementServer(servicer, options.address, token=state.token.current, tls=tls,
                              connection_idle_s=options.connection_idle_s,
                              limits=options.limits)
    address = server.start()
    fp = fingerprint(tls.cert.read_bytes()) if tls is not None else ""
    if not config.deploy.trusted_keys and not config.deploy.allow_unsigned:
        log.warning("no trusted public key (--trust): every deploy will be refused until "
                    "one is configured (or --allow-unsigned for development)")
    if config.discovery.enabled:
        try:
            link.start(lambda: _advert(identity, core.manager, server.port,
                                       ends.addresses.tcp or "", fp), config.discovery.interfaces)
        except BaseException:
            server.stop()
            raise
    return ManagementParts(identity=identity, server=server, address=address,
                           fingerprint=fp, advert=link.running)


def start_fleet(config: AgentConfig, state: StateParts, core: CoreParts,
                registry: Callable[[], RegistrySettings],
                management: str | None = None) -> FleetMember | None:
    """Join the fleet through ``[fleet] broker`` (docs/fleet.md); None when it is not set.
    ``management``: the management API's bound HOST:PORT, said in the agent's presence so a
    console that can reach it drills down over the direct connection."""
    if config.fleet.broker is None:
        return None
    from packager.extras import refusal

    if refused := refusal("fleet", "[fleet] broker"):
        raise ConfigError(refused)
    from edge_agent.fleet.member import FleetMember

    device = core.manager.device
    member = FleetMember(config.fleet, core.manager, state_dir=config.state_dir,
                         name=config.management.name, registry=registry, metrics=state.metrics,
                         info={"name": config.management.name, "arch": device.arch,
                               "profile": device.profile, "agent_version": __version__,
                               **({"management": dialable(management)} if management else {})})
    member.start()
    return member


def dialable(address: str) -> str:
    """``address`` (a bound HOST:PORT) as another machine dials it: a wildcard host (all
    interfaces) becomes this machine's name."""
    host, _, port = address.rpartition(":")
    if host.strip("[]") in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"{host}:{port}"


class _AdvertLink:
    """The mDNS advert, re-announced when the servicer reports a change (models, profile)."""

    def __init__(self) -> None:
        self.running: BackgroundAdvertiser | None = None
        self._advert: Callable[[], AgentAdvert] | None = None

    def start(self, advert: Callable[[], AgentAdvert], interfaces: Sequence[str]) -> None:
        from edge_agent.discovery import BackgroundAdvertiser

        running = BackgroundAdvertiser(advert(), interfaces=list(interfaces) or None)
        if not running.start():
            running.stop()
            return
        self.running, self._advert = running, advert

    def changed(self) -> None:
        if self.running is not None and self._advert is not None:
            self.running.update(self._advert())


def _advert(identity: AgentIdentity, manager: ModelManager, mgmt_port: int,
            inference_address: str, fp: str) -> AgentAdvert:
    from edge_agent.deploy.manager import names_of
    from edge_agent.discovery import AgentAdvert

    port = inference_address.rpartition(":")[2]
    return AgentAdvert(id=identity.agent_id, name=identity.name, arch=manager.device.arch,
                       profile=manager.device.profile, mgmt_port=mgmt_port,
                       grpc_port=int(port) if port.isdigit() else 0, fingerprint=fp,
                       models=tuple(names_of(manager.versions())))


def _socket_dir(directory: Path) -> None:
    """Create the Unix socket's directory 0755 (the agent runs with umask 077): the socket's
    own mode (0660) is what admits the apps of its group."""
    if directory.exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)


class Agent:
    """One agent process: :meth:`run` builds every part in order, serves until a stop signal,
    and stops them in reverse. The parts are readable once ``on_ready`` is called."""

    def __init__(self, config: AgentConfig, *, grace: float = 5.0,
                 reload: Callable[[], AgentConfig] | None = None) -> None:
        self.config = config
        self.grace = grace
        self._reload = reload
        self._state: StateParts | None = None
        self._core: CoreParts | None = None
        self._ends: FrontEnds | None = None
        self._mgmt: ManagementParts | None = None
        self._fleet: FleetMember | None = None
        self._stopping = ""  # what _stop is doing (for the stop deadline's message)

    # -- the parts (after on_ready) ---------------------------------------------------------
    @property
    def state(self) -> StateParts:
        """The state directory's parts."""
        if self._state is None:
            raise AgentError("the agent's state directory is not open")
        return self._state

    @property
    def core(self) -> CoreParts:
        """The data plane and the deploy manager."""
        if self._core is None:
            raise AgentError("the agent's data plane is not running")
        return self._core

    @property
    def frontends(self) -> FrontEnds:
        """The inference front ends."""
        if self._ends is None:
            raise AgentError("the agent's front ends are not running")
        return self._ends

    @property
    def management(self) -> ManagementParts | None:
        """The management API's parts; None when it is off."""
        return self._mgmt

    @property
    def addresses(self) -> BoundAddresses:
        """Where the agent listens (``management`` set when the API is on)."""
        return dataclasses.replace(self.frontends.addresses, management=self.management_address)

    @property
    def dataplane(self) -> DataPlane:
        """The data plane."""
        return self.core.dataplane

    @property
    def manager(self) -> ModelManager:
        """The deploy manager."""
        return self.core.manager

    @property
    def management_address(self) -> str | None:
        """The management API's HOST:PORT, or None when it is off."""
        return self._mgmt.address if self._mgmt is not None else None

    @property
    def token(self) -> str:
        """The management token callers must present now (it follows ``token --rotate``)."""
        return self.state.token.current()

    @property
    def fingerprint(self) -> str:
        """The management certificate's fingerprint ("" while plaintext or off)."""
        return self._mgmt.fingerprint if self._mgmt is not None else ""

    # -- run ----------------------------------------------------------------------------------
    def run(self, on_ready: Callable[[Agent], None] | None = None,
            stop_event: threading.Event | None = None) -> int:
        """Serve until SIGTERM/SIGINT (or ``stop_event``); ``on_ready(agent)`` runs once
        everything listens. Returns the exit code (0)."""
        stop = stop_event or threading.Event()
        hup = threading.Event()
        previous: dict[int, SignalHandler] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: stop.set())
            previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: hup.set())
        notifier = SystemdNotifier()
        try:
            notifier.status("starting: opening state and loading models")
            log_ring.install()  # from the start: `edge-console logs` shows the models loading
            config = self.config
            log.info("starting (edge-agent %s, state directory %s)", __version__,
                     config.state_dir)
            self._state = open_state(config)
            self._core = build_core(config, self._state)
            self._ends = start_frontends(config, self._state, self._core)
            start_models(self._core)
            if not stop.is_set():  # a SIGTERM during loading: never report ready
                self._mgmt = start_management(config, self._state, self._core, self._ends)
                self._fleet = start_fleet(config, self._state, self._core,
                                          lambda: self.config.registry,
                                          self._mgmt.address if self._mgmt else None)
                self._ends.grpc.mark_serving()
                notifier.start_watchdog(healthy=self._core.dataplane.live)
                active = [f"{v.model}:{v.version}" for v in self._core.manager.versions()
                          if v.active]
                notifier.ready(f"serving {len(active)} model(s): {', '.join(active) or 'none'}")
                log.info("ready: serving %d model(s) (%s) on %s", len(active),
                         ", ".join(active) or "none", ", ".join(self._ends.addresses.targets()))
                if on_ready is not None:
                    on_ready(self)
            while not stop.wait(0.5):
                if hup.is_set():
                    hup.clear()
                    self._on_sighup(notifier)
            notifier.stopping("draining in-flight requests")
            log.info("shutting down: draining in-flight requests")
        finally:
            notifier.stop_watchdog()
            if previous and stop_event is None:  # `edge-agent serve` (the signals are ours,
                # nobody embeds this run): the process never outlives the stop deadline
                threading.Thread(target=self._exit_if_stuck, daemon=True,
                                 name="stop-deadline").start()
            self._stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 0

    def _stop(self) -> None:
        """Stop whatever started, in reverse order (safe after a partial start)."""
        if self._fleet is not None:
            self._stopping = "leaving the fleet broker"
            self._fleet.stop()
            self._fleet = None
        if self._mgmt is not None:
            self._stopping = "stopping the management API"
            self._mgmt.stop()
            self._mgmt = None
        if self._ends is not None:
            self._stopping = "draining the front ends"
            self._ends.stop(self.grace)
            self._ends = None
        if self._core is not None:
            self._stopping = "stopping deployments and unloading models"
            self._core.close()
            self._core = None
        if self._state is not None:
            self._stopping = "closing the state"
            self._state.close()
            self._state = None
            log.info("stopped")
        self._stopping = ""

    def _exit_if_stuck(self) -> None:
        """``STOP_DEADLINE_S`` after the stop signal, exit if the process is still here: a
        deployment stuck in native code (a load that never returns) must not keep the agent
        alive past its stop. Every step is journaled, so the next start treats it as it treats
        a crash mid-deploy: the deployment recorded as interrupted, the committed version
        served. (A daemon thread: it runs on while the interpreter waits for other threads.)"""
        time.sleep(STOP_DEADLINE_S)
        busy = [t.name for t in threading.enumerate()
                if not t.daemon and t is not threading.main_thread()]
        doing = self._stopping or (f"waiting for threads {', '.join(busy)}" if busy else
                                   "waiting for a worker thread (a deployment step)")
        log.error("still %s %g s after the stop signal; exiting now (an unfinished deployment "
                  "is recorded as interrupted at the next start)", doing, STOP_DEADLINE_S)
        logging.shutdown()
        os._exit(1)

    def apply_live_settings(self, config: AgentConfig) -> None:
        """Apply what a reload (SIGHUP) may change: trust, retention, watch settings and
        ``[registry]`` (the next deploy by reference uses it; a pull under way keeps its own).
        The rest of ``config`` takes effect at the next start."""
        self.config = dataclasses.replace(self.config, deploy=config.deploy,
                                          registry=config.registry)
        if self._core is not None:
            self._core.manager.settings = config.deploy
        if self._mgmt is not None:
            self._mgmt.server.servicer.registry = config.registry

    def _on_sighup(self, notifier: SystemdNotifier) -> None:
        if self._reload is None:
            log.warning("SIGHUP: no config file to reload")
            return
        notifier.notify("RELOADING=1")
        try:
            self.apply_live_settings(self._reload())
            log.warning("SIGHUP: configuration reloaded (trust, retention, watch settings, "
                        "[registry])")
        except Exception as exc:  # a bad edit must not take the agent down
            log.error("SIGHUP: the configuration was not reloaded: %s", exc)
        finally:
            notifier.notify("READY=1")


def serve(config: AgentConfig, *, on_ready: Callable[[BoundAddresses, DataPlaneAPI], None]
          | None = None, stop_event: threading.Event | None = None, grace: float = 5.0,
          reload: Callable[[], AgentConfig] | None = None) -> int:
    """``edge-agent serve``: run an :class:`Agent` until SIGTERM/SIGINT (or ``stop_event``).

    ``on_ready`` gets the bound addresses (``management`` set when the API is on) and the data
    plane. ``reload`` returns the configuration read again on SIGHUP."""

    def ready(agent: Agent) -> None:
        if on_ready is not None:
            on_ready(agent.addresses, agent.dataplane)

    return Agent(config, grace=grace, reload=reload).run(ready, stop_event)
