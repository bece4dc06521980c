"""``edge-console fleet view``: a live terminal view of a fleet group through the broker
(docs/fleet.md): counts per state and per version, and the agents, filtered. Built for
thousands of agents: the table shows at most MAX_ROWS of the filtered agents (failed and
offline first), the counts always cover all of them."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Input, Static

from console.fleet_broker import AgentView, FleetBroker, counts

MAX_ROWS = 500
REFRESH_S = 1.0
ORDER = {"failed": 0, "offline": 1, "pending": 2, "ok": 3}


def matches(agent: AgentView, text: str) -> bool:
    """The filter: every word must appear in the agent's id, state or versions."""
    hay = " ".join([agent.agent_id, agent.state, *agent.versions()]).lower()
    return all(word in hay for word in text.lower().split())


class BrokerFleetApp(App[None]):
    """The group's agents as the broker knows them, refreshed every second."""

    TITLE = "edge-console fleet"
    BINDINGS = [Binding("q", "quit", "quit"), Binding("/", "filter", "filter")]

    def __init__(self, broker: FleetBroker, group: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.broker, self.group = broker, group
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="summary")
        yield Input(placeholder="filter: words in id, state or model:version", id="filter")
        yield DataTable(id="agents", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"group {self.group} at {self.broker.broker}"
        self.query_one(DataTable).add_columns("agent", "state", "revision", "models",
                                              "refused")
        self.refresh_view()
        self.set_interval(REFRESH_S, self.refresh_view)

    def action_filter(self) -> None:
        self.query_one(Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.refresh_view()

    def refresh_view(self) -> None:
        agents = self.broker.group_agents(self.group)
        states, versions = counts(agents)
        shown = sorted((a for a in agents if matches(a, self.filter_text)),
                       key=lambda a: (ORDER.get(a.state, 9), a.agent_id))
        self.query_one("#summary", Static).update(
            f"{len(agents)} agents: " + "  ".join(f"{k} {v}" for k, v in sorted(states.items()))
            + "\nversions: " + ("  ".join(f"{k} {v}" for k, v in sorted(versions.items()))
                                or "-")
            + f"\nshown: {min(len(shown), MAX_ROWS)} of {len(shown)} matching")
        table = self.query_one(DataTable)
        table.clear()
        for a in shown[:MAX_ROWS]:
            refused = (a.status or {}).get("refused") or {}
            table.add_row(a.agent_id, a.state, str(a.revision), ", ".join(a.versions()) or "-",
                          str(refused.get("reason") or ""), key=a.agent_id)
