"""A fleet as its MQTT broker tells it, in Textual (docs/fleet.md): :class:`BrokerAgents`, a
panel of counts per group, state and version above a filtered table of the agents, used by
``edge-console fleet view`` (:class:`BrokerFleetApp`, one group) and beside the mDNS agents in
the console's fleet screen (``--broker``; console/screens/fleet.py). Built for thousands of
agents: the table shows at most MAX_ROWS of the filtered agents (failed and offline first),
the counts always cover all of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Footer, Header, Input, Static

from console.filtering import Filter, parse_filter
from console.fleet_broker import AgentView, FleetBroker, counts

MAX_ROWS = 500
REFRESH_S = 1.0
ORDER = {"failed": 0, "offline": 1, "pending": 2, "ok": 3}


def matches(agent: AgentView, flt: Filter) -> bool:
    """The filter (console/filtering.py: words, regexes, ``!word``) over the agent's id,
    group, state and versions."""
    return flt.matches(" ".join([agent.agent_id, agent.group, agent.state, *agent.versions()]))


def _counted(agents: list[AgentView]) -> str:
    states, versions = counts(agents)
    return (f"{len(agents)} agents: " + "  ".join(f"{k} {v}" for k, v in sorted(states.items()))
            + "\nversions: " + ("  ".join(f"{k} {v}" for k, v in sorted(versions.items()))
                                or "-"))


def summary(agents: list[AgentView], matching: int) -> str:
    """Counts per state and per ``model:version`` of ``agents``, then per group when there
    are several, and how many rows the table shows."""
    groups = sorted({a.group for a in agents})
    lines = [_counted(agents)]
    if len(groups) > 1:
        for group in groups:
            lines.append(f"group {group or '-'}: " + _counted(
                [a for a in agents if a.group == group]).replace("\n", " · "))
    lines.append(f"shown: {min(matching, MAX_ROWS)} of {matching} matching")
    return "\n".join(lines)


class BrokerAgents(Vertical):
    """The agents of ``group`` (None: every group) at the broker ``source()`` gives (None:
    not connected yet), refreshed every REFRESH_S; ``own_filter`` False: the screen around it
    calls :meth:`set_filter`."""

    DEFAULT_CSS = """
    BrokerAgents { height: 1fr; }
    BrokerAgents > #summary { height: auto; padding: 0 1; }
    BrokerAgents > DataTable { height: 1fr; }
    """

    def __init__(self, source: Callable[[], FleetBroker | None], group: str | None = None,
                 *, own_filter: bool = True, **kw: Any) -> None:
        super().__init__(**kw)
        self.source, self.group, self.own_filter = source, group, own_filter
        self.filter = Filter()
        self.shown: list[AgentView] = []
        self._rows: list[tuple[str, ...]] = []

    def compose(self) -> ComposeResult:
        yield Static("connecting to the fleet broker...", id="summary")
        if self.own_filter:
            yield Input(placeholder="filter: words in id, group, state or model:version",
                        id="filter")
        yield DataTable(id="agents", zebra_stripes=True, cursor_type="row")

    @property
    def table(self) -> DataTable[Any]:
        """The agents' table."""
        return self.query_one("#agents", DataTable)

    def on_mount(self) -> None:
        self.table.add_columns("agent", "state", "revision", "models", "refused", "group")
        self.refresh_view()
        self.set_interval(REFRESH_S, self.refresh_view)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.set_filter(event.value)

    def set_filter(self, text: str) -> None:
        """Show only the agents matching ``text``."""
        self.filter = parse_filter(text)
        self.refresh_view()

    def selected(self) -> str | None:
        """The id of the agent under the table's cursor."""
        row = self.table.cursor_row
        return self.shown[row].agent_id if 0 <= row < min(len(self.shown), MAX_ROWS) else None

    def refresh_view(self) -> None:
        """Re-read the broker's view: counts, then the filtered rows (grouped, failed first)."""
        broker = self.source()
        if broker is None:
            return
        agents = broker.group_agents(self.group)
        self.shown = sorted((a for a in agents if matches(a, self.filter)),
                            key=lambda a: (a.group, ORDER.get(a.state, 9), a.agent_id))
        where = f"group {self.group}" if self.group else "every group"
        self.query_one("#summary", Static).update(
            f"fleet broker {broker.broker}, {where}\n" + summary(agents, len(self.shown)))
        rows: list[tuple[str, ...]] = [
            (a.agent_id, a.state, str(a.revision), ", ".join(a.versions()) or "-",
             str(((a.status or {}).get("refused") or {}).get("reason") or ""), a.group)
            for a in self.shown[:MAX_ROWS]]
        if rows == self._rows:  # the table is the costly part: rebuilt only on a change
            return
        self._rows = rows
        table = self.table
        row = table.cursor_row
        table.clear()
        for cells in rows:
            table.add_row(*cells, key=cells[0])
        if table.row_count:
            table.move_cursor(row=min(row, table.row_count - 1))


class BrokerFleetApp(App[None]):
    """``edge-console fleet view``: one group's agents as the broker knows them."""

    TITLE = "edge-console fleet"
    BINDINGS = [Binding("q", "quit", "quit"), Binding("/", "filter", "filter")]

    def __init__(self, broker: FleetBroker, group: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.broker, self.group = broker, group

    def compose(self) -> ComposeResult:
        yield Header()
        yield BrokerAgents(lambda: self.broker, self.group)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"group {self.group} at {self.broker.broker}"

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()
