"""The doctor screen (``c`` on an agent): the agent's device checks (``edge-agent doctor`` run on
the device), each problem with its fix."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Header, Static

from console.errors import ConsoleError
from console.screens.base import ConsoleScreen
from console.widgets.console_footer import ConsoleFooter
from edge_agent.client.types import DoctorReport

STATUS_STYLES = {"fail": "bold red", "warn": "yellow", "ok": "green", "info": "dim"}


@dataclass
class DoctorArrived(Message):
    """GetDoctor answered (``error`` set when it failed)."""

    report: DoctorReport | None
    error: str = ""


class DoctorScreen(ConsoleScreen):
    """One agent's device checks, by fleet key."""

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", tooltip="Back to the agent"),
        Binding("ctrl+r", "reload", "Run again", tooltip="Ask the agent to check again"),
    ]

    def __init__(self, key: str, report: DoctorReport | None = None) -> None:
        super().__init__()
        self.key = key
        self.report = report

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("asking the agent to check its device...", id="doctor-summary")
        table: DataTable[str | Text] = DataTable(id="doctor-table", cursor_type="row")
        yield table
        yield ConsoleFooter()

    def on_mount(self) -> None:
        agent = self.console.fleet.get(self.key)
        self.sub_title = f"doctor of {agent.name if agent is not None else self.key}"
        self.query_one(DataTable).add_columns("AREA", "CHECK", "STATUS", "DETAIL", "WHAT TO DO")
        if self.report is not None:
            self.show(self.report)
        elif self.console.poll_enabled:
            self.ask()

    @work(thread=True, exclusive=True, group="doctor", exit_on_error=False)
    def ask(self) -> None:
        agent = self.console.fleet.get(self.key)
        try:
            if agent is None:
                raise ConsoleError("the agent is no longer listed")
            report = self.console.connections.call(agent, lambda c: c.doctor())
        except ConsoleError as exc:
            self.post_message(DoctorArrived(None, str(exc)))
            return
        self.post_message(DoctorArrived(report))

    def on_doctor_arrived(self, message: DoctorArrived) -> None:
        if message.report is None:
            self.query_one("#doctor-summary", Static).update(
                Text(f"the doctor could not run: {message.error}", style="red"))
            return
        self.show(message.report)

    def show(self, report: DoctorReport) -> None:
        """Fill the table with ``report``."""
        self.report = report
        failed = sum(f.status == "fail" for f in report.findings)
        warned = sum(f.status == "warn" for f in report.findings)
        summary = ("no check failed" if report.ok else f"{failed} check(s) FAILED") + (
            f", {warned} warning(s)" if warned else "")
        self.query_one("#doctor-summary", Static).update(
            Text(summary, style="green" if report.ok and not warned else
                 "red" if not report.ok else "yellow"))
        table = self.query_one(DataTable)
        table.clear()
        for f in report.findings:
            table.add_row(f.area, f.check, Text(f.status, style=STATUS_STYLES.get(f.status, "")),
                          f.detail, f.fix)

    def action_reload(self) -> None:
        self.query_one("#doctor-summary", Static).update("asking the agent again...")
        self.ask()
