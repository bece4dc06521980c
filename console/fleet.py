"""The fleet as the console sees it: a protocol-free view model fed by discovery and probes.

:class:`Fleet` merges three sources into one row per agent: mDNS discovery events, static
``HOST:PORT`` entries (config file, ``--agent``), and the results of asking each agent for its
state (:class:`ProbeResult`). Screens read :meth:`Fleet.view` (filtered and sorted rows) and
subscribe with :meth:`Fleet.subscribe` to hear about changes. Nothing here touches the network.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from console.config import StaticAgent
from console.discovery import DiscoveredAgent, DiscoveryEvent
from console.filtering import Filter, parse_filter

SUPPORTED_API_VERSIONS = frozenset({"1"})
MAX_EVENTS = 500


class AgentState(StrEnum):
    """What the console knows about an agent right now."""

    UNKNOWN = "unknown"  # listed, not asked yet
    ONLINE = "online"
    OFFLINE = "offline"  # left the network (mDNS goodbye) or stopped answering
    UNREACHABLE = "unreachable"  # advertised or listed, but does not answer
    AUTH_FAILED = "wrong token"
    API_MISMATCH = "api mismatch"


PROBLEM_STATES = frozenset({AgentState.UNREACHABLE, AgentState.AUTH_FAILED,
                            AgentState.API_MISMATCH})


def api_mismatch_message(api: str) -> str:
    """What to tell the operator when an agent speaks another management API version."""
    ours = ", ".join(sorted(SUPPORTED_API_VERSIONS))
    return (f"agent speaks management API v{api or '?'}, this console speaks v{ours}: "
            "upgrade whichever side is older")


@dataclass(frozen=True, slots=True)
class FleetAgent:
    """One row of the fleet table."""

    key: str  # stable identity in the table: HOST:PORT for static entries, else the agent id
    name: str
    host: str
    port: int
    agent_id: str = ""
    arch: str = ""
    profile: str = ""
    api: str = ""
    state: AgentState = AgentState.UNKNOWN
    message: str = ""  # why the state is not ONLINE, in words the operator can act on
    last_seen: float | None = None  # wall-clock time of the last sign of life
    models: tuple[str, ...] = ()  # "name:version" of the active versions
    static: bool = False
    discovered: bool = False
    grpc_port: int | None = None
    details: Mapping[str, str] = field(default_factory=dict)
    answered: bool = False  # has answered a probe at least once
    left: bool = False  # said goodbye over mDNS (and has not come back)
    fingerprint: str = ""  # certificate fingerprint from the mDNS advert ("plaintext": none)
    rates: tuple[float, ...] = ()  # requests/s of all models, last minutes, oldest first
    errors: tuple[float, ...] = ()  # errors/s over the same buckets

    @property
    def address(self) -> str:
        """``HOST:PORT`` of the management API."""
        return f"{self.host}:{self.port}"

    @property
    def source(self) -> str:
        """How the console knows this agent: ``mdns``, ``static`` or ``static+mdns``."""
        return "+".join(s for s, on in (("static", self.static), ("mdns", self.discovered)) if on)

    @property
    def reachable(self) -> bool:
        """True when management calls can be attempted (listed and not known to be gone)."""
        return self.state not in (AgentState.OFFLINE, AgentState.API_MISMATCH)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The outcome of asking one agent for its state (GetInfo + ListModels)."""

    state: AgentState
    message: str = ""
    agent_id: str = ""
    name: str = ""
    arch: str = ""
    profile: str = ""
    api: str = ""
    models: tuple[str, ...] | None = None
    details: Mapping[str, str] | None = None
    rates: tuple[float, ...] | None = None  # None: not asked (the last ones stay)
    errors: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class FleetEvent:
    """One line of the console's event log (``l``)."""

    at: float
    agent: str  # agent name, or "" for console-wide events
    level: str  # "info" | "warning" | "error"
    text: str


def _sort_value(agent: FleetAgent, column: str) -> tuple[object, ...]:
    order = {AgentState.ONLINE: 0, AgentState.UNKNOWN: 1, AgentState.AUTH_FAILED: 2,
             AgentState.API_MISMATCH: 3, AgentState.UNREACHABLE: 4, AgentState.OFFLINE: 5}
    match column:
        case "status":
            return (order[agent.state], agent.name.lower())
        case "address":
            return (tuple(int(p) if p.isdigit() else 0 for p in agent.host.split(".")),
                    agent.host, agent.port)
        case "arch" | "profile":
            return (getattr(agent, column), agent.name.lower())
        case "models":
            return (len(agent.models), agent.models)
        case "seen":
            return (-(agent.last_seen or 0.0), agent.name.lower())
        case "rate" | "errors":
            values = getattr(agent, "rates" if column == "rate" else "errors")
            return (-(values[-1] if values else -1.0), agent.name.lower())
        case _:
            return (agent.name.lower(), agent.key)


def _is_offline(agent: FleetAgent) -> bool:
    return agent.state is AgentState.OFFLINE


SORT_COLUMNS = ("name", "status", "rate", "errors", "address", "arch", "profile", "models",
                "seen")


def matches(agent: FleetAgent, query: str | Filter) -> bool:
    """True when the agent's name, id, address, arch, profile, state, source and models
    satisfy ``query`` (:mod:`console.filtering`: all words, ``!word`` excludes, regexes)."""
    filt = parse_filter(query) if isinstance(query, str) else query
    hay = " ".join((agent.name, agent.agent_id, agent.address, agent.arch, agent.profile,
                    agent.state.value, agent.source, *agent.models))
    return filt.matches(hay)


class Fleet:
    """All agents the console knows, keyed by :attr:`FleetAgent.key`."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._agents: dict[str, FleetAgent] = {}
        self._listeners: list[Callable[[], object]] = []
        self.events: deque[FleetEvent] = deque(maxlen=MAX_EVENTS)
        self.version = 0  # bumped on every change

    # -- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._agents)

    def get(self, key: str) -> FleetAgent | None:
        """The agent with this key, if listed."""
        return self._agents.get(key)

    def find_prefix(self, text: str) -> tuple[FleetAgent | None, list[str]]:
        """The agent ``text`` names exactly (key, name, id, address), else the one agent whose
        name starts with it (case ignored); with no unique match, the names that start with
        it (to say what was ambiguous)."""
        exact = self.find(text)
        if exact is not None:
            return exact, [exact.name]
        low = text.lower()
        hits = sorted((a for a in self._agents.values() if a.name.lower().startswith(low)),
                      key=lambda a: a.name)
        return (hits[0] if len(hits) == 1 else None), [a.name for a in hits]

    def forget(self, key: str) -> bool:
        """Drop an offline agent from the list (it comes back if it announces itself again);
        False when it is not offline (a live agent is never forgotten)."""
        agent = self._agents.get(key)
        if agent is None or not _is_offline(agent):
            return False
        del self._agents[key]
        self._event(agent.name, "info", "forgotten (offline)")
        self._changed()
        return True

    def find(self, text: str) -> FleetAgent | None:
        """The agent whose key, name, id or address equals ``text`` (for ``:agent NAME``)."""
        for agent in self._agents.values():
            if text in (agent.key, agent.name, agent.agent_id, agent.address):
                return agent
        return None

    def agents(self) -> list[FleetAgent]:
        """Every agent, by name."""
        return self.view()

    def view(self, query: str = "", sort: str = "name", reverse: bool = False, *,
             show_offline: bool = True) -> list[FleetAgent]:
        """The rows to show: those matching ``query`` (offline ones only with
        ``show_offline``), sorted by column ``sort``."""
        filt = parse_filter(query)
        rows = [a for a in self._agents.values()
                if (not filt or matches(a, filt)) and (show_offline or not _is_offline(a))]
        return sorted(rows, key=lambda a: _sort_value(a, sort), reverse=reverse)

    # -- change notification -------------------------------------------------------------------
    def subscribe(self, listener: Callable[[], object]) -> Callable[[], None]:
        """Call ``listener`` after every change; returns the function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _changed(self) -> None:
        self.version += 1
        for listener in list(self._listeners):
            listener()

    def log(self, agent: str, level: str, text: str) -> None:
        """Add a line to the event log."""
        self._event(agent, level, text)
        self._changed()

    def _event(self, agent: str, level: str, text: str) -> None:
        """Record an event stamped with the console's clock, keeping the log in time order."""
        event = FleetEvent(self.clock(), agent, level, text)
        if self.events and event.at < self.events[-1].at:  # a clock step back: re-sort
            ordered = sorted([*self.events, event], key=lambda e: e.at)
            self.events.clear()
            self.events.extend(ordered)
        else:
            self.events.append(event)

    def _put(self, agent: FleetAgent) -> None:
        self._agents[agent.key] = agent

    # -- sources -------------------------------------------------------------------------------
    def add_static(self, entries: Iterable[StaticAgent]) -> None:
        """List agents given by address (config file, ``--agent``)."""
        for entry in entries:
            existing = self._by_address(entry.host, entry.port)
            if existing is not None:
                self._put(replace(existing, static=True, name=entry.name or existing.name))
                continue
            self._put(FleetAgent(key=entry.address, name=entry.name or entry.address,
                                 host=entry.host, port=entry.port, static=True))
        self._changed()

    def _by_address(self, host: str, port: int, hosts: Iterable[str] = ()) -> FleetAgent | None:
        candidates = {host, *hosts}
        for agent in self._agents.values():
            if agent.port == port and agent.host in candidates:
                return agent
        return None

    def _by_id(self, agent_id: str) -> FleetAgent | None:
        for agent in self._agents.values():
            if agent_id and agent.agent_id == agent_id:
                return agent
        return None

    def apply_discovery(self, event: DiscoveryEvent) -> None:
        """Fold one mDNS event into the fleet."""
        found = event.agent
        existing = self._by_id(found.id) or self._by_address(found.host, found.port,
                                                             found.addresses)
        if event.kind == "removed":
            if existing is None:
                return
            # A goodbye is news from now: the record's own time is when it was last resolved.
            self._put(replace(existing, state=AgentState.OFFLINE, last_seen=self.clock(),
                              left=True, message="left the network (mDNS goodbye)"))
            self._event(existing.name, "warning", "went offline")
            self._changed()
            return
        now = found.last_seen or self.clock()
        agent = self._merge_discovered(existing, found, now)
        self._put(agent)
        if existing is None or existing.left:
            self._event(agent.name, "info", f"discovered at {agent.address} ({agent.profile})")
        self._changed()

    def _merge_discovered(self, existing: FleetAgent | None, found: DiscoveredAgent,
                          now: float) -> FleetAgent:
        models = tuple(m for m in found.txt.get("models", "").split(",") if m and m != "...")
        base = existing or FleetAgent(key=found.id, name=found.name, host=found.host,
                                      port=found.port)
        state, message = base.state, base.message
        if found.api and found.api not in SUPPORTED_API_VERSIONS:  # no api: let GetInfo tell
            state, message = AgentState.API_MISMATCH, api_mismatch_message(found.api)
        elif base.left or state is AgentState.API_MISMATCH:
            state, message = AgentState.UNKNOWN, ""
        return replace(
            base, name=base.name if base.static and base.name != base.address else found.name,
            host=found.host, port=found.port, agent_id=found.id, arch=found.arch,
            profile=found.profile, api=found.api, state=state, message=message,
            last_seen=now, models=models or base.models, discovered=True, left=False,
            grpc_port=found.grpc_port,
            fingerprint="plaintext" if found.plaintext else found.fingerprint)

    def apply_probe(self, key: str, result: ProbeResult) -> None:
        """Fold the outcome of asking agent ``key`` for its state into the fleet."""
        agent = self._agents.get(key)
        if agent is None:
            return
        if agent.left and not agent.static:
            return  # it said goodbye; a late probe answer does not bring it back
        now = self.clock()
        online = result.state is AgentState.ONLINE
        state, message = result.state, result.message
        if state is AgentState.UNREACHABLE and agent.answered:
            # it answered before: it went away without a goodbye (crash, power, network)
            state, message = AgentState.OFFLINE, f"stopped answering: {message}"
        if state is AgentState.OFFLINE and agent.state is not AgentState.OFFLINE:
            self._event(agent.name, "warning", "went offline (stopped answering)")
        elif not online and agent.state is AgentState.ONLINE:
            self._event(agent.name, "error", message)
        elif online and agent.state in PROBLEM_STATES | {AgentState.OFFLINE}:
            self._event(agent.name, "info", "answering again")
        updated = replace(
            agent, state=state, message=message, answered=agent.answered or online,
            last_seen=now if online else agent.last_seen,
            agent_id=result.agent_id or agent.agent_id,
            name=result.name if result.name and agent.name == agent.address else agent.name,
            arch=result.arch or agent.arch, profile=result.profile or agent.profile,
            api=result.api or agent.api,
            models=agent.models if result.models is None else result.models,
            details=agent.details if result.details is None else result.details,
            rates=agent.rates if result.rates is None else result.rates,
            errors=agent.errors if result.errors is None else result.errors)
        if updated != agent:
            self._put(updated)
            self._changed()


def format_duration(seconds: float) -> str:
    """A duration as ``42s``, ``3m05s`` or ``1h02m``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_ago(seconds: float | None) -> str:
    """A compact age: ``now``, ``42s``, ``5m``, ``3h``, ``2d`` (``-`` for never)."""
    if seconds is None:
        return "-"
    if seconds < 2:
        return "now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"
