"""The fleet screen: every agent found by mDNS or listed by address, live; with ``--broker``
(or ``[fleet]``) the agents of a fleet's MQTT broker beside them (console/fleet_view.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Input, Static

from console.fleet import SORT_COLUMNS, AgentState, FleetAgent
from console.fleet_view import BrokerAgents
from console.messages import FleetChanged, SortRequested
from console.screens.base import ConsoleScreen
from console.widgets.console_footer import ConsoleFooter
from console.widgets.fleet_table import STATE_STYLES, FleetTable

REFRESH_MIN_INTERVAL_S = 0.1


class FleetScreen(ConsoleScreen):
    """The table of agents, a filter bar (``/``) and a line explaining the selected agent."""

    BINDINGS = [
        Binding("enter", "open_agent", "Open", priority=True,
                tooltip="Open the selected agent's screen"),
        Binding("slash", "filter", "Filter", tooltip="Filter agents by name, profile, state..."),
        Binding("escape", "clear_filter", "Clear filter", show=False,
                tooltip="Clear the filter"),
        Binding("d", "details", "Details", tooltip="Everything known about the selected agent"),
        Binding("s", "sort_next", "Sort", tooltip="Sort by the next column"),
        Binding("S", "sort_reverse", "Reverse", show=False, tooltip="Reverse the sort order"),
        Binding("D", "deploy", "Deploy", tooltip="Deploy bundles to agents (staged rollout)"),
        Binding("h", "history", "History", tooltip="Past throughput and latency of the "
                "selected agent's models"),
        Binding("ctrl+r", "refresh", "Refresh", show=False, tooltip="Ask every agent now"),
        Binding("o", "toggle_offline", "Offline", tooltip="Show or hide offline agents"),
        Binding("x", "forget", "Forget", show=False,
                tooltip="Drop the selected offline agent from the list"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.query_text = ""
        self.sort_column = "name"
        self.sort_reverse = False
        self.show_offline = True
        self._unsubscribe: Callable[[], None] = lambda: None
        self._seen_version = -1
        self._last_refresh = 0.0
        self._refresh_pending = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield FleetTable(id="fleet-table")
        yield Static("", id="fleet-status")
        broker = self.console.settings.broker
        if broker is not None:  # Tab moves between the two tables
            yield BrokerAgents(lambda: self.console.broker, broker.group, own_filter=False,
                               id="broker-agents")
        yield Input(placeholder="filter: words that must all match (regex), !word to exclude",
                    id="fleet-filter", classes="hidden")
        yield ConsoleFooter()

    @property
    def table(self) -> FleetTable:
        """The fleet table widget."""
        return self.query_one(FleetTable)

    @property
    def broker_panel(self) -> BrokerAgents | None:
        """The fleet broker's agents (with ``--broker``), else None."""
        found = self.query(BrokerAgents)
        return found.first() if found else None

    def on_mount(self) -> None:
        self._unsubscribe = self.console.fleet.subscribe(
            lambda: self.post_message(FleetChanged()))
        self.table.set_sort_marker(self.sort_column, self.sort_reverse)
        self.refresh_fleet()
        self.set_interval(1.0, self.refresh_fleet)  # ages in LAST SEEN move with the clock
        self.table.focus()

    def on_unmount(self) -> None:
        self._unsubscribe()

    # -- rendering -----------------------------------------------------------------------------
    def on_fleet_changed(self, _: FleetChanged) -> None:
        """Refresh now, or once at the end of the current 0.1 s window during a burst (100
        agents announcing at once must not mean 100 table rebuilds)."""
        if self._refresh_pending:
            return
        wait = self._last_refresh + REFRESH_MIN_INTERVAL_S - time.monotonic()
        if wait <= 0:
            self.refresh_fleet()
            return
        self._refresh_pending = True

        def deferred() -> None:
            self._refresh_pending = False
            self.refresh_fleet()

        self.set_timer(wait, deferred)

    def refresh_fleet(self) -> None:
        """Re-render the table from the fleet model (filtered and sorted)."""
        self._last_refresh = time.monotonic()
        fleet = self.console.fleet
        rows = fleet.view(self.query_text, self.sort_column, self.sort_reverse,
                          show_offline=self.show_offline)
        self.table.show(rows, self.console.clock())
        self._seen_version = fleet.version
        online = sum(a.state is AgentState.ONLINE for a in fleet.agents())
        narrowed = self.query_text or not self.show_offline
        self.sub_title = (f"{len(fleet)} agents · {online} online"
                          + (f" · showing {len(rows)}" if narrowed else "")
                          + (f" · filter {self.query_text}" if self.query_text else "")
                          + ("" if self.show_offline else " · offline hidden")
                          + (" · read-only" if self.console.read_only else ""))
        self._explain(self.selected_agent())

    def _explain(self, agent: FleetAgent | None) -> None:
        status = self.query_one("#fleet-status", Static)
        filt = f"[b]filter:[/b] {escape(self.query_text)}   " if self.query_text else ""
        if agent is None:
            hint = ("no agents yet: waiting for mDNS announcements (or add --agent HOST:PORT)"
                    if not len(self.console.fleet) else "no agent matches the filter")
            status.update(filt + hint)
            return
        style = STATE_STYLES[agent.state]
        why = f": {escape(agent.message)}" if agent.message else ""
        status.update(f"{filt}[b]{escape(agent.name)}[/b] [{style}]{agent.state.value}[/]{why}")

    def selected_agent(self) -> FleetAgent | None:
        """The agent under the cursor."""
        key = self.table.selected_key
        return None if key is None else self.console.fleet.get(key)

    def on_data_table_row_highlighted(self, _: DataTable.RowHighlighted) -> None:
        self._explain(self.selected_agent())

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_agent()

    # -- filter and sort -----------------------------------------------------------------------
    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.remove_class("hidden")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value.strip()
        self.refresh_fleet()
        if self.broker_panel is not None:  # one filter for both lists
            self.broker_panel.set_filter(self.query_text)

    def on_input_submitted(self, _: Input.Submitted) -> None:
        # the filter collapses into the header (sub-title) and the status line; / edits it
        self.query_one("#fleet-filter", Input).add_class("hidden")
        self.table.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.value = ""
        box.add_class("hidden")
        self.query_text = ""
        self.refresh_fleet()
        if self.broker_panel is not None:
            self.broker_panel.set_filter("")
        self.table.focus()

    def sort_by(self, column: str, reverse: bool | None = None) -> None:
        """Sort the table by ``column`` (same column again: reverse the order)."""
        if reverse is None:
            reverse = not self.sort_reverse if column == self.sort_column else False
        self.sort_column, self.sort_reverse = column, reverse
        self.table.set_sort_marker(column, reverse)
        self.refresh_fleet()

    def on_sort_requested(self, message: SortRequested) -> None:
        self.sort_by(message.column)

    def action_sort_next(self) -> None:
        nxt = SORT_COLUMNS[(SORT_COLUMNS.index(self.sort_column) + 1) % len(SORT_COLUMNS)]
        self.sort_by(nxt, reverse=False)

    def action_sort_reverse(self) -> None:
        self.sort_by(self.sort_column, reverse=not self.sort_reverse)

    # -- actions on the selected agent ---------------------------------------------------------
    def action_open_agent(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        if self.focused is box:  # Enter in the filter bar keeps the filter, back to the table
            self.on_input_submitted(Input.Submitted(box, box.value))
            return
        panel = self.broker_panel
        if panel is not None and self.focused is panel.table:  # a fleet agent: drill down
            agent_id = panel.selected()
            if agent_id is not None:
                self.console.open_broker_agent(agent_id)
            return
        agent = self.selected_agent()
        if agent is None:
            self.notify("No agent selected", severity="warning")
            return
        self.console.open_agent(agent.key)

    def action_details(self) -> None:
        agent = self.selected_agent()
        if agent is not None:
            self.console.show_details(agent)

    def action_deploy(self) -> None:
        agent = self.selected_agent()
        self.console.open_deploy(preselect=[agent.key] if agent else [])

    def action_history(self) -> None:
        agent = self.selected_agent()
        if agent is not None:
            self.console.open_history(agent.key)

    def action_toggle_offline(self) -> None:
        self.show_offline = not self.show_offline
        self.refresh_fleet()

    def action_forget(self) -> None:
        agent = self.selected_agent()
        if agent is None:
            return
        if not self.console.fleet.forget(agent.key):
            self.notify(f"{agent.name} is {agent.state.value}: only offline agents can be "
                        "forgotten", severity="warning")

    def action_refresh(self) -> None:
        self.console.poll_agents()
        self.notify("Asking every agent now")
