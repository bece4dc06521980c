"""The console's one door to agents: management clients per agent, and error translation.

Every call the TUI makes goes through :class:`edge_agent.client.agent_client.AgentClient` (the
same client the scripting subcommands use). The client is blocking; the TUI calls these
functions from worker threads (``asyncio.to_thread`` or thread workers), never on the UI loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from console.config import ConsoleSettings
from console.errors import (
    AgentAuthError,
    AgentRequestError,
    AgentUnreachableError,
    ApiVersionMismatchError,
    ConsoleError,
)
from console.fleet import (
    SUPPORTED_API_VERSIONS,
    AgentState,
    FleetAgent,
    ProbeResult,
    api_mismatch_message,
)
from console.known_agents import KnownAgents, UntrustedAgentError, changed_error, open_client
from edge_agent.client import agent_client as mgmt
from edge_agent.client.types import MetricPoint

T = TypeVar("T")
PROBE_TIMEOUT_S = 3.0
TRAFFIC_STEP_S = 30  # the fleet table's rate and error sparklines: 10 buckets of 30 s
TRAFFIC_BUCKETS = 10
MIN_PARTIAL_S = 5  # a newest bucket covering fewer seconds is left out of the rate


def console_error(exc: Exception) -> ConsoleError:
    """The console error for a failed management call (messages stay the client's words)."""
    if isinstance(exc, ConsoleError):
        return exc
    text = str(exc) or type(exc).__name__
    if isinstance(exc, mgmt.AuthenticationError):
        return AgentAuthError(f"{text} (set the agent's token in the console config [tokens] "
                              "or pass --token-file F)")
    if isinstance(exc, mgmt.ManagementUnreachableError | mgmt.InferencePortError):
        return AgentUnreachableError(text)
    if isinstance(exc, mgmt.ManagementError):
        if exc.status == "UNIMPLEMENTED":
            return ApiVersionMismatchError(f"{text}: the agent does not speak this console's "
                                           "management API; upgrade whichever side is older")
        if exc.status in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            return AgentUnreachableError(text)
        return AgentRequestError(text)
    return AgentRequestError(f"unexpected {type(exc).__name__}: {text}")


def probe_state(error: ConsoleError) -> AgentState:
    """The fleet state an error of a probe puts an agent in."""
    if isinstance(error, AgentAuthError):
        return AgentState.AUTH_FAILED
    if isinstance(error, ApiVersionMismatchError):
        return AgentState.API_MISMATCH
    return AgentState.UNREACHABLE


def _transport(client: mgmt.AgentClient) -> str:
    """How the console talks to the agent, for the details view."""
    if isinstance(client.tls, mgmt.PinnedTls):
        return f"TLS, pinned certificate {client.tls.fingerprint}"
    if client.tls is not None:
        return f"TLS, certificate signed by {client.tls.ca}"
    return "PLAINTEXT (--insecure)"


def traffic_window(end: float) -> tuple[int, int]:
    """The fleet sparklines' window at ``end``: (start of the first bucket, seconds the newest
    bucket covers). The agent stores whole seconds, so the newest bucket covers the seconds
    from its start up to the last whole one; one with fewer than ``MIN_PARTIAL_S`` is left
    out and the window ends with the last complete bucket."""
    now = int(end)
    newest = now - now % TRAFFIC_STEP_S
    covered = now - newest
    if covered < MIN_PARTIAL_S:
        newest, covered = newest - TRAFFIC_STEP_S, TRAFFIC_STEP_S
    return newest - (TRAFFIC_BUCKETS - 1) * TRAFFIC_STEP_S, covered


def traffic_rates(points: Iterable[MetricPoint], end: float
                  ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Requests/s and errors/s of ``points`` (``TRAFFIC_STEP_S`` buckets, models summed) in
    the window at ``end``: complete buckets over their 30 s, the newest over the seconds it
    covers so far (never a partly filled bucket over the whole step); idle buckets are zeros."""
    first, covered = traffic_window(end)
    requests = [0.0] * TRAFFIC_BUCKETS
    errors = [0.0] * TRAFFIC_BUCKETS
    for p in points:
        i = (p.ts - first) // TRAFFIC_STEP_S
        if 0 <= i < TRAFFIC_BUCKETS:
            seconds = covered if i == TRAFFIC_BUCKETS - 1 else TRAFFIC_STEP_S
            requests[i] += p.requests / seconds
            errors[i] += p.errors / seconds
    return tuple(requests), tuple(errors)


def _recent_traffic(client: mgmt.AgentClient, models: list[str], *, now: float | None = None
                    ) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """Requests/s and errors/s of ``models`` summed, over the last
    ``TRAFFIC_BUCKETS`` x ``TRAFFIC_STEP_S`` seconds (see :func:`traffic_rates`; None: unknown)."""
    end = int(time.time() if now is None else now)  # the second under way is not stored yet
    first, _ = traffic_window(end)
    try:
        points = [p for model in models
                  for p in client.query_metrics(model, start=first, end=end,
                                                step_s=TRAFFIC_STEP_S)]
    except mgmt.ManagementError:
        return None, None  # the row keeps its last sparkline; the probe itself went fine
    return traffic_rates(points, end)


class Connections:
    """One management client per agent address (channels are reused across polls)."""

    def __init__(self, settings: ConsoleSettings, *, timeout_s: float = 30.0) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._clients: dict[str, mgmt.AgentClient] = {}
        self._probe_clients: dict[str, mgmt.AgentClient] = {}
        self._lock = threading.Lock()
        self.untrusted: dict[str, str] = {}  # first contacts waiting for the operator: fp

    def _get(self, pool: dict[str, mgmt.AgentClient], agent: FleetAgent,
             timeout_s: float) -> mgmt.AgentClient:
        with self._lock:
            found = pool.get(agent.address)
        if found is not None:
            return found
        token = self.settings.token_for(agent_id=agent.agent_id, name=agent.name,
                                        address=agent.address)
        # outside the lock: opening a TLS client fetches the agent's certificate first
        made = open_client(agent.address, self.settings, token, timeout_s=timeout_s)
        with self._lock:
            found = pool.setdefault(agent.address, made)
        if found is not made:  # another thread was quicker
            made.close()
        return found

    def _error(self, exc: Exception, agent: FleetAgent) -> ConsoleError:
        """``exc`` as a console error; a changed certificate names its known_agents line."""
        if isinstance(exc, mgmt.CertificateChangedError) and not isinstance(exc, ConsoleError):
            return changed_error(exc, KnownAgents(self.settings.known_agents), agent.address)
        if isinstance(exc, UntrustedAgentError) and exc.fingerprint:
            with self._lock:
                self.untrusted[agent.address] = exc.fingerprint
        return console_error(exc)

    def client(self, agent: FleetAgent) -> mgmt.AgentClient:
        """The management client of ``agent`` (shared; do not close it)."""
        return self._get(self._clients, agent, self.timeout_s)

    def call(self, agent: FleetAgent, fn: Callable[[mgmt.AgentClient], T]) -> T:
        """Run ``fn(client)``; management errors come out as :class:`ConsoleError`."""
        try:
            return fn(self.client(agent))
        except (mgmt.ManagementError, ConsoleError) as exc:
            raise self._error(exc, agent) from None

    def probe(self, agent: FleetAgent) -> ProbeResult:
        """Ask ``agent`` who it is and which versions are active; never raises."""
        try:
            client = self._get(self._probe_clients, agent, PROBE_TIMEOUT_S)
            info = client.info()
            if info.api_version and info.api_version not in SUPPORTED_API_VERSIONS:
                return ProbeResult(AgentState.API_MISMATCH, api_mismatch_message(
                    info.api_version), api=info.api_version)
            versions = client.models()
        except (mgmt.ManagementError, ConsoleError) as exc:
            error = self._error(exc, agent)
            return ProbeResult(probe_state(error), str(error))
        except Exception as exc:  # a probe must never take the UI down
            return ProbeResult(AgentState.UNREACHABLE, f"{type(exc).__name__}: {exc}")
        active = tuple(sorted(f"{v.model}:{v.version}" for v in versions if v.active))
        details = {"agent version": info.agent_version, "host": info.host,
                   "runtimes": ", ".join(info.runtimes) or "-",
                   "uptime": f"{info.uptime_s:.0f}s",
                   "inference address": info.inference_address or "-",
                   "keep versions": str(info.keep_versions),
                   "unsigned bundles": "allowed" if info.allow_unsigned else "refused",
                   "connection": _transport(client)}
        rates, errors = _recent_traffic(client, sorted({v.model for v in versions if v.active}))
        return ProbeResult(AgentState.ONLINE, "", agent_id=info.agent_id, name=info.name,
                           arch=info.arch, profile=info.profile, api=info.api_version,
                           models=active, details=details, rates=rates, errors=errors)

    def trust(self, address: str, fingerprint: str) -> None:
        """Pin ``fingerprint`` for ``address`` (the operator said yes at first contact)."""
        KnownAgents(self.settings.known_agents).add(address, fingerprint)
        with self._lock:
            self.untrusted.pop(address, None)

    def forget(self, address: str) -> None:
        """Drop the clients of ``address`` (e.g. after its token changed)."""
        with self._lock:
            gone = [p.pop(address) for p in (self._clients, self._probe_clients)
                    if address in p]
        for c in gone:
            c.close()

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            clients = [*self._clients.values(), *self._probe_clients.values()]
            self._clients.clear()
            self._probe_clients.clear()
        for c in clients:
            c.close()
