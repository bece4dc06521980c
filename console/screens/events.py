"""The events screen (``e``): the console's log of discoveries, state changes and actions."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Input

from console.filtering import parse_filter
from console.messages import FleetChanged
from console.screens.base import ConsoleScreen
from console.widgets.console_footer import ConsoleFooter

LEVEL_STYLES = {"info": "", "warning": "yellow", "error": "bold red"}


class EventsScreen(ConsoleScreen):
    """Newest first; ``agent`` limits it to one agent's lines."""

    BINDINGS = [
        Binding("escape,q,e", "back", "Back"),
        Binding("slash", "filter", "Filter", tooltip="Filter events (regex words, !word)"),
    ]

    def __init__(self, agent: str | None = None) -> None:
        super().__init__()
        self.agent = agent
        self._unsubscribe: Callable[[], None] = lambda: None
        self._shown = -1
        self.query_text = ""

    def compose(self) -> ComposeResult:
        yield Header()
        table: DataTable[str | Text] = DataTable(id="events-table", cursor_type="row")
        yield table
        yield Input(placeholder="filter: words that must all match (regex), !word to exclude",
                    id="events-filter", classes="hidden")
        yield ConsoleFooter()

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

    def action_filter(self) -> None:
        box = self.query_one("#events-filter", Input)
        box.remove_class("hidden")
        box.focus()

    def action_back(self) -> None:
        box = self.query_one("#events-filter", Input)
        if self.query_text or self.focused is box:  # Esc clears the filter first
            box.value = ""
            box.add_class("hidden")
            self.query_one(DataTable).focus()
            return
        self.app.pop_screen()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value.strip()
        self._shown = -1
        self._render_events()

    def on_input_submitted(self, _: Input.Submitted) -> None:
        self.query_one("#events-filter", Input).add_class("hidden")
        self.query_one(DataTable).focus()

    def _render_events(self) -> None:
        if self.console.fleet.version == self._shown:
            return
        self._shown = self.console.fleet.version
        filt = parse_filter(self.query_text)
        events = [e for e in self.console.fleet.events
                  if (not self.agent or e.agent == self.agent)
                  and (not filt or filt.matches(f"{e.agent} {e.level} {e.text}"))]
        title = f"events of {self.agent}" if self.agent else "events"
        self.sub_title = title + (f" · filter {self.query_text}" if self.query_text else "")
        table = self.query_one(DataTable)
        table.clear()
        for e in reversed(events):
            table.add_row(time.strftime("%H:%M:%S", time.gmtime(e.at)), e.agent or "console",
                          Text(e.text, style=LEVEL_STYLES.get(e.level, "")))
