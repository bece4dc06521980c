"""A real agent (edge_agent.agent.Agent) on a thread of the test process:
inference gRPC and management gRPC on 127.0.0.1 port 0, no Unix socket.

The management API is plaintext (``insecure``) unless ``start_agent(..., tls=True)`` or the
options name TLS files: most tests here are about deploys, faults and tokens, where TLS would
only cost time. :meth:`InProcessAgent.client` returns a client that fits either way (TLS: the
agent's certificate pinned by fingerprint)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.agent import Agent
from edge_agent.config import (
    AgentConfig,
    DiscoveryConfig,
    GrpcConfig,
    ManagementConfig,
    ManagementSections,
    ManagerSettings,
    MetricsConfig,
    ModelsConfig,
    with_management,
)
from edge_agent.management.client import AgentClient, PinnedTls


@dataclass
class InProcessAgent:
    """A running agent; :meth:`stop` ends it (SIGTERM-equivalent: drain and exit)."""

    state_dir: Path
    stop_event: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)
    runtime: Agent | None = None
    grpc: str = ""
    error: BaseException | None = None
    thread: threading.Thread | None = None

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


def run_configured(config: AgentConfig, options: ManagementSections, *,
                   timeout_s: float = 120.0, name: str = "agent-under-test") -> InProcessAgent:
    """Run an :class:`Agent` of ``config`` with the management-side ``options`` on a thread
    and wait until it serves (its state directory created first); AssertionError naming the
    cause when it does not start."""
    agent = InProcessAgent(config.state_dir)

    def on_ready(running: Agent) -> None:
        agent.runtime, agent.grpc = running, running.addresses.tcp or ""
        agent.ready.set()

    def main() -> None:
        try:
            Agent(with_management(config, options), grace=2.0).run(
                on_ready, agent.stop_event)
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
def trusted_agent(state_dir: Path, public_key: Path, *, name: str = "test-agent",
                  deploy: Path | None = None, tls: bool = False) -> Iterator[InProcessAgent]:
    """A running agent that trusts ``public_key`` (mDNS off, no auto-rollback watch window),
    with ``deploy`` deployed first when given; stopped on exit."""
    running = start_agent(state_dir, sections(name, public_key), tls=tls)
    try:
        if deploy is not None:
            with running.client() as client:
                result = client.deploy(deploy)
                assert result.ok, result
        yield running
    finally:
        running.stop()
