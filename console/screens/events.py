"""The events screen (``l``): the console's log of discoveries, state changes and actions."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Footer, Header

from console.messages import FleetChanged
from console.screens.base import ConsoleScreen

LEVEL_STYLES = {"info": "", "warning": "yellow", "error": "bold red"}


class EventsScreen(ConsoleScreen):
    """Newest first; ``agent`` limits it to one agent's lines."""

    BINDINGS = [("escape,q,l", "app.pop_screen", "Back")]

    def __init__(self, agent: str | None = None) -> None:
        super().__init__()
        self.agent = agent
        self._unsubscribe: Callable[[], None] = lambda: None
        self._shown = -1

    def compose(self) -> ComposeResult:
        yield Header()
        table: DataTable[str | Text] = DataTable(id="events-table", cursor_type="row")
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"events of {self.agent}" if self.agent else "events"
        self.query_one(DataTable).add_columns("TIME (UTC)", "AGENT", "EVENT")
        self._unsubscribe = self.console.fleet.subscribe(
            lambda: self.post_message(FleetChanged()))
        self._render_events()

    def on_unmount(self) -> None:
        self._unsubscribe()

    def on_fleet_changed(self, _: FleetChanged) -> None:
        self._render_events()

    def _render_events(self) -> None:
        if self.console.fleet.version == self._shown:
            return
        self._shown = self.console.fleet.version
        events = [e for e in self.console.fleet.events if not self.agent or e.agent == self.agent]
        table = self.query_one(DataTable)
        table.clear()
        for e in reversed(events):
            table.add_row(time.strftime("%H:%M:%S", time.gmtime(e.at)), e.agent or "console",
                          Text(e.text, style=LEVEL_STYLES.get(e.level, "")))
