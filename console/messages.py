"""Messages the console's workers and widgets post (dataclasses, so they print readably)."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message


@dataclass
class FleetChanged(Message):
    """The fleet view model changed; a newer one replaces an unhandled older one."""

    def can_replace(self, message: Message) -> bool:  # collapse bursts (100 agents appearing)
        return isinstance(message, FleetChanged)


@dataclass
class SortRequested(Message):
    """The operator asked to sort the fleet table by ``column``."""

    column: str


@dataclass
class AgentSnapshotReady(Message):
    """A poll of one agent finished (``snapshot.error`` set when it failed)."""

    key: str
    snapshot: object  # console.agent_view.AgentSnapshot (kept loose: messages stay UI-only)


@dataclass
class MetricsArrived(Message):
    """One live WatchMetrics sample (or ``error``: why the stream stopped)."""

    key: str
    sample: object | None  # edge_agent.client.types.MetricsSample
    error: str = ""


@dataclass
class ActionFinished(Message):
    """A change the operator asked for (rollback, activate, remove) ended."""

    key: str
    title: str
    ok: bool
    message: str


@dataclass
class HistoryArrived(Message):
    """Stored metrics of one agent's models for one plot range (``error``: why not)."""

    key: str
    range_label: str
    points: dict[str, list[object]]  # model -> edge_agent.client.types.MetricPoint list
    until: float = 0.0  # the query's end: live seconds before it are in the points
    error: str = ""
    system: list[object] = field(default_factory=list)  # SystemPoint list: the device's


@dataclass
class RolloutsChanged(Message):
    """A background rollout moved on; a newer one replaces an unhandled older one."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RolloutsChanged)
