"""The one harness that starts an agent under test, in one of two modes.

- **In-process** (:func:`run_configured`, :func:`running`, :func:`start_agent`,
  :func:`trusted_agent`): the real agent (``edge_agent.agent.Agent``; :func:`sections` builds
  its management side) on a thread of the test process, inference gRPC (and management gRPC)
  on 127.0.0.1 port 0. Fast to start; the test can reach the data
  plane and the runtime.
- **Subprocess** (:class:`AgentProcess`): ``python -m edge_agent.cli serve`` in its own process
  group, ports read from its ready line; for crashes, signals, restarts and the CLI.

Both are plaintext on the management API (``insecure``) unless TLS is asked for, and both give
``client()`` (a management client with the agent's token; the certificate pinned under TLS).
:func:`managed_agent` runs only the serving core and the deploy manager (no servers at all).
Every mode stops what it started: use the context managers, or call ``stop()`` in a ``finally``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.agent import Agent
from edge_agent.cli import main as agent_cli
from edge_agent.client.agent_client import AgentClient, PinnedTls
from edge_agent.config import (
    AgentConfig,
    DiscoveryConfig,
    GrpcConfig,
    ManagementConfig,
    ManagementSections,
    ManagerSettings,
    MetricsConfig,
    ModelsConfig,
    load_config,
    with_management,
)
from edge_agent.core.dataplane import DataPlane
from edge_agent.deploy.manager import ModelManager
from edge_agent.server import BoundAddresses
from edge_agent.state import StateStore
from tests.support.eventually import eventually

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"edge-agent ready: listening on (?P<listen>.*?); (?:management on "
                   r"(?P<mgmt>\S+?)|management off);")
START_DEADLINE_S = 120.0


# -- in-process mode -----------------------------------------------------------------------


@dataclass
class InProcessAgent:
    """A running agent; :meth:`stop` ends it (SIGTERM-equivalent: drain and exit)."""

    state_dir: Path
    stop_event: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)
    runtime: Agent | None = None
    addresses: BoundAddresses | None = None
    dataplane: Any = None
    grpc: str = ""
    error: BaseException | None = None
    thread: threading.Thread | None = None

    @property
    def tcp(self) -> str:
        """The inference gRPC HOST:PORT."""
        assert self.grpc, "the agent has no TCP listener"
        return self.grpc

    @property
    def uds(self) -> str:
        """The inference gRPC Unix socket as a target (``unix://PATH``)."""
        assert self.addresses is not None and self.addresses.uds, "the agent has no socket"
        return f"unix://{self.addresses.uds}"

    @property
    def http(self) -> str:
        """The KServe HTTP front end's HOST:PORT."""
        assert self.addresses is not None and self.addresses.http, "the agent serves no HTTP"
        return self.addresses.http

    @property
    def management(self) -> str:
        assert self.runtime is not None and self.runtime.management_address
        return self.runtime.management_address

    @property
    def token(self) -> str:
        assert self.runtime is not None
        return self.runtime.token

    @property
    def fingerprint(self) -> str:
        """The management certificate's fingerprint ("" when plaintext)."""
        assert self.runtime is not None
        return self.runtime.fingerprint

    def client(self, **kw: Any) -> AgentClient:
        """A management client with the agent's token (and its certificate pinned)."""
        tls = PinnedTls(self.fingerprint) if self.fingerprint else None
        return AgentClient(self.management, token=self.token, tls=tls, **kw)

    def deploy(self, bundle: Path) -> Any:
        """Deploy ``bundle`` through the management API; the deploy result."""
        with self.client() as client:
            return client.deploy(bundle)

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(60)
            assert not self.thread.is_alive(), "agent did not stop"


def sections(name: str, *trusted: Path, watch_window_s: float = 0.0, insecure: bool = False,
             mdns_interfaces: tuple[str, ...] = (), metrics: bool = True,
             **deploy: Any) -> ManagementSections:
    """The management side of a test agent: the API on 127.0.0.1 port 0 named ``name``,
    trusting ``trusted`` (``deploy``: more deploy settings), no watch window unless given,
    mDNS only when ``mdns_interfaces`` are given (and only on them)."""
    return ManagementSections(
        management=ManagementConfig(address="127.0.0.1:0", name=name, insecure=insecure),
        deploy=ManagerSettings(trusted_keys=trusted, watch_window_s=watch_window_s, **deploy),
        discovery=DiscoveryConfig(enabled=bool(mdns_interfaces), interfaces=mdns_interfaces),
        metrics=MetricsConfig(enabled=metrics))


def start_agent(state_dir: Path, options: ManagementSections, *,
                workers: int = 24, repository_control: bool = False,
                tls: bool = False, response_cache_bytes: int = 0) -> InProcessAgent:
    """Start an agent on ``state_dir`` and wait until it serves; plaintext management unless
    ``tls`` (or TLS files in ``options``); ``response_cache_bytes``: the cache budget."""
    api = options.management
    if not tls and api.tls is None and api.client_ca is None:
        options = dataclasses.replace(options,
                                      management=dataclasses.replace(api, insecure=True))
    config = AgentConfig(state_dir=state_dir,
                         grpc=GrpcConfig(address="127.0.0.1:0", uds_enabled=False,
                                         workers=workers,
                                         repository_control=repository_control),
                         models=ModelsConfig(response_cache_bytes=response_cache_bytes))
    return run_configured(config, options)


def run_configured(config: AgentConfig, options: ManagementSections | None = None, *,
                   timeout_s: float = START_DEADLINE_S,
                   name: str = "agent-under-test") -> InProcessAgent:
    """Run an :class:`Agent` of ``config`` (with the management-side ``options`` in place of
    its own, when given) on a thread and wait until it serves (its state directory created
    first). AssertionError naming the cause when it does not start."""
    agent = InProcessAgent(config.state_dir)
    if options is not None:
        config = with_management(config, options)

    def on_ready(running: Agent) -> None:
        agent.runtime, agent.addresses = running, running.addresses
        agent.dataplane, agent.grpc = running.dataplane, running.addresses.tcp or ""
        agent.ready.set()

    def main() -> None:
        try:
            Agent(config, grace=2.0).run(on_ready, agent.stop_event)
        except BaseException as exc:  # surfaced below
            agent.error = exc
            agent.ready.set()

    config.state_dir.mkdir(parents=True, exist_ok=True)
    agent.thread = threading.Thread(target=main, name=name, daemon=True)
    agent.thread.start()
    if not agent.ready.wait(timeout_s) or agent.error is not None:
        agent.stop()
        raise AssertionError(f"agent did not start: {agent.error!r}")
    return agent


@contextlib.contextmanager
def running(config: AgentConfig, options: ManagementSections | None = None, *,
            timeout_s: float = START_DEADLINE_S,
            name: str = "agent-under-test") -> Iterator[InProcessAgent]:
    """:func:`run_configured` as a context manager: the agent is stopped on exit."""
    agent = run_configured(config, options, timeout_s=timeout_s, name=name)
    try:
        yield agent
    finally:
        agent.stop()


@contextlib.contextmanager
def serving_bundles(root: Path, bundles: list[Path], agent_toml: str = "", *,
                    options: ManagementSections | None = None,
                    name: str = "agent-under-test") -> Iterator[InProcessAgent]:
    """A running agent on ``root/state`` serving ``bundles`` (added unsigned, as
    ``edge-agent add-bundle --allow-unsigned`` does) with ``agent_toml``, gRPC and HTTP on
    127.0.0.1 port 0, no Unix socket; stopped on exit."""
    state = root / "state"
    for bundle in bundles:
        assert agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned",
                          str(bundle)]) == 0
    toml = root / "agent.toml"
    toml.write_text(agent_toml)
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0", no_uds=True,
                         http_address="127.0.0.1:0")
    with running(config, options, timeout_s=180, name=name) as agent:
        assert agent.addresses is not None and agent.addresses.http
        yield agent


@contextlib.contextmanager
def trusted_agent(state_dir: Path, public_key: Path, *, name: str = "test-agent",
                  deploy: Path | None = None, tls: bool = False) -> Iterator[InProcessAgent]:
    """A running agent that trusts ``public_key`` (mDNS off, no auto-rollback watch window),
    with ``deploy`` deployed first when given; stopped on exit."""
    agent = start_agent(state_dir, sections(name, public_key), tls=tls)
    try:
        if deploy is not None:
            result = agent.deploy(deploy)
            assert result.ok, result
        yield agent
    finally:
        agent.stop()


# -- the serving core alone ------------------------------------------------------------------


@dataclass
class ManagedAgent:
    """A running data plane and manager; deploy with ``manager.deploy(bundle)``."""

    manager: ModelManager
    dataplane: DataPlane
    store: StateStore


@contextlib.contextmanager
def managed_agent(state: Path, public_key: Path) -> Iterator[ManagedAgent]:
    """The agent's core on a thread of the test: a real data plane and model manager over a
    real SQLite state directory trusting ``public_key`` (no servers); everything closed after."""
    dataplane = DataPlane(state, autoload=False)
    store = StateStore.open(state)
    manager = ModelManager(dataplane, store, ManagerSettings(
        trusted_keys=(public_key,), watch_window_s=0.0))
    manager.start()
    try:
        yield ManagedAgent(manager, dataplane, store)
    finally:
        manager.close()
        dataplane.close()
        store.close()


# -- subprocess mode -------------------------------------------------------------------------


class AgentProcess:
    """One ``edge-agent serve`` subprocess (its own process group). Use as a context manager
    (always stopped), or call :meth:`stop` in a ``finally``.

    Inference and management on 127.0.0.1 port 0, no Unix socket, mDNS off unless ``extra``
    says otherwise (``extra`` replaces the default ``--no-mdns``)."""

    def __init__(self, state_dir: Path, *, trust: Path | None = None,
                 allow_unsigned: bool = False, env: dict[str, str] | None = None,
                 extra: list[str] | None = None, tls: bool = False,
                 name: str = "test-agent", command: list[str] | None = None) -> None:
        """``command`` runs another installation's agent (e.g. ``[VENV/bin/edge-agent]``, with
        ``env`` its whole environment); by default this Python runs this checkout's."""
        self.state_dir = Path(state_dir)
        self.name = name
        self.args = [*(command or [sys.executable, "-m", "edge_agent.cli"]), "serve",
                     "--state-dir", str(self.state_dir), "--grpc", "127.0.0.1:0", "--no-uds",
                     "--management", "127.0.0.1:0", "--name", name]
        if trust is not None:
            self.args += ["--trust", str(trust)]
        if allow_unsigned:
            self.args.append("--allow-unsigned")
        self.tls = tls
        if not tls:
            self.args.append("--insecure")
        self.args += extra if extra is not None else ["--no-mdns"]
        self.env = ({**os.environ, "PYTHONPATH": str(ROOT), **(env or {})} if command is None
                    else dict(env or os.environ))
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self.grpc = self.management = ""

    def start(self, timeout: float = START_DEADLINE_S) -> AgentProcess:
        """Start the process and wait for its ready line; AssertionError with its output when
        it exits or stays silent past ``timeout``."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.args, env=self.env, cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            match = READY.search(line)
            if match:
                tcp = [t for t in match["listen"].split(", ") if not t.startswith("unix:")]
                self.grpc, self.management = tcp[0], match["mgmt"] or ""
                return self
        self.kill()
        raise AssertionError(f"agent {self.name} did not become ready:\n" + "".join(self.output))

    @property
    def address(self) -> str:
        """The management API's HOST:PORT (the same as :attr:`management`)."""
        return self.management

    @property
    def token(self) -> str:
        """The management token (created by the agent in its state directory)."""
        return (self.state_dir / "management.token").read_text().strip()

    @property
    def agent_id(self) -> str:
        """The agent's id (as advertised)."""
        return (self.state_dir / "agent-id").read_text().strip()

    @property
    def fingerprint(self) -> str:
        """The management certificate's fingerprint (the agent creates it at first start)."""
        from edge_agent.management.tls import fingerprint_of

        return fingerprint_of(self.state_dir)

    def client(self, token: str | None = None, **kw: Any) -> AgentClient:
        """A management client: the certificate pinned when TLS is on; the token from the
        state directory unless given."""
        tls = PinnedTls(self.fingerprint) if self.tls else None
        return AgentClient(self.management, token=token or self.token, tls=tls, **kw)

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for_output(self, text: str, *, since: int = 0,
                        timeout: float = START_DEADLINE_S) -> str:
        """Wait until a line of output after the first ``since`` lines holds ``text``; return
        that line. AssertionError (with the output) if the process exits first or ``timeout``
        passes."""
        def line() -> str:
            assert self.proc is not None
            found = next((x for x in self.output[since:] if text in x), "")
            if not found and self.proc.poll() is not None:
                raise AssertionError(f"agent exited before printing {text!r}:\n"
                                     + "".join(self.output))
            return found

        return eventually(line, timeout=timeout, interval=0.05,
                          message=lambda: f"no {text!r} from the agent:\n" + "".join(self.output))

    def wait_for_file(self, path: Path, timeout: float = START_DEADLINE_S) -> None:
        """Wait until ``path`` exists; AssertionError (with the output) if the process exits
        first or ``timeout`` passes."""
        def appeared() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited before {path} appeared:\n"
                                     + "".join(self.output))
            return path.exists()

        eventually(appeared, timeout=timeout, interval=0.05,
                   message=lambda: f"{path} never appeared:\n" + "".join(self.output))

    def kill(self) -> None:
        """SIGKILL the whole process group (kill -9)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit. Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
