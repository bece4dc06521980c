"""The details modal (``d``): everything the console knows about one agent."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Label

from console.fleet import FleetAgent, format_ago
from console.screens.base import ConsoleModal

VALUE_WIDTH = 70  # the value column at most; longer values wrap


def detail_rows(agent: FleetAgent, now: float) -> list[tuple[str, str]]:
    """(field, value) pairs describing ``agent``."""
    seen = "never" if agent.last_seen is None else (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(agent.last_seen))
        + f" ({format_ago(max(0.0, now - agent.last_seen))})")
    rows = [("name", agent.name), ("id", agent.agent_id or "-"), ("status", agent.state.value),
            ("why", agent.message or "-"), ("management", agent.address),
            ("inference port", str(agent.grpc_port or "-")), ("arch", agent.arch or "-"),
            ("profile", agent.profile or "-"), ("management API", agent.api or "-"),
            ("found by", agent.source or "-"),
            ("certificate (mDNS)", agent.fingerprint or "-"), ("last seen", seen),
            ("models", ", ".join(agent.models) or "-")]
    rows += [(k, v) for k, v in sorted(agent.details.items())]
    return rows


class DetailsScreen(ConsoleModal[None]):
    """Shows :func:`detail_rows` of one agent."""

    BINDINGS = [("escape,d,q", "dismiss_modal", "Close")]

    def __init__(self, agent: FleetAgent, now: float) -> None:
        super().__init__()
        self.agent, self.now = agent, now

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details-box", classes="dialog"):
            yield Label(f"Agent {self.agent.name}", classes="dialog-title")
            table: DataTable[str] = DataTable(id="details-table", show_header=False,
                                              cursor_type="none")
            yield table

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        field_width = max(len(k) for k, _ in detail_rows(self.agent, self.now))
        # the values wrap (a fingerprint folds) within what the dialog leaves them: never cut
        width = max(20, min(VALUE_WIDTH, self.app.size.width * 8 // 10 - field_width - 12))
        table.add_column("field", width=field_width)
        table.add_column("value", width=width)
        for key, value in detail_rows(self.agent, self.now):
            table.add_row(key, Text(value, overflow="fold"), height=None)
