"""The rollouts view: running and recent rollouts of this session, the per-target steps of the
selected one, and cancel (a canary under watch is rolled back)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Label, Static

from console.fleet import format_duration as elapsed
from console.messages import RolloutsChanged
from console.rollout.session import RolloutJob
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmScreen
from console.widgets.console_footer import ConsoleFooter
from console.widgets.target_row import PHASE_STYLES


def _clock(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%H:%M:%S", time.gmtime(ts))


DETAIL_WIDTH = 60  # the DETAIL column; the whole text is in the line under the table


def _cut(text: str) -> str:
    """``text`` for the DETAIL column: its first line, cut with ``…`` when longer."""
    first = text.splitlines()[0] if text else ""
    if len(first) > DETAIL_WIDTH:
        return first[:DETAIL_WIDTH - 1] + "…"
    return first + (" …" if first != text else "")


class RolloutsScreen(ConsoleScreen):
    """One row per rollout (newest first); below, every target and step of the selected one."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", tooltip="Back"),
        Binding("c", "cancel_rollout", "Cancel rollout",
                tooltip="Stop the selected rollout (a canary under watch is rolled back)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._unsubscribe: Callable[[], None] = lambda: None
        self._order: list[int] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="rollouts-table", cursor_type="row", zebra_stripes=True)
        yield Label("Targets and steps of the selected rollout", classes="section-title")
        yield DataTable(id="rollout-steps", cursor_type="row")
        yield Static("", id="rollout-step-detail")  # the highlighted step's detail, wrapped
        yield Static("", id="rollouts-status")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.sub_title = "rollouts"
        self.query_one("#rollouts-table", DataTable).add_columns(
            "#", "STARTED (UTC)", "ENDED", "ELAPSED", "WHAT", "CANARY", "STATUS")
        self.query_one("#rollout-steps", DataTable).add_columns(
            "AGENT", "PHASE", "STEP", "OK", "AT (UTC)", "+", "DETAIL")
        self._unsubscribe = self.console.rollouts.subscribe(
            lambda: self.post_message(RolloutsChanged()))
        self.show_rollouts()
        self.query_one("#rollouts-table", DataTable).focus()

    def on_unmount(self) -> None:
        self._unsubscribe()

    def on_rollouts_changed(self, _: RolloutsChanged) -> None:
        self.show_rollouts()

    @property
    def selected(self) -> RolloutJob | None:
        """The rollout under the cursor."""
        table = self.query_one("#rollouts-table", DataTable)
        if not self._order or not 0 <= table.cursor_row < len(self._order):
            return None
        return self.console.rollouts.get(self._order[table.cursor_row])

    def show_rollouts(self) -> None:
        """List every rollout, keeping the cursor on the same one."""
        table = self.query_one("#rollouts-table", DataTable)
        chosen = self.selected
        jobs = self.console.rollouts.jobs
        table.clear()
        for job in jobs:
            status = job.status()
            style = ("yellow" if job.running else "green" if job.outcome and job.outcome.ok
                     else "bold red")
            canary = job.targets.get(job.canary)
            took = (job.ended_at if job.ended_at is not None else self.console.clock()
                    ) - job.started_at
            table.add_row(str(job.id), _clock(job.started_at), _clock(job.ended_at),
                          elapsed(took) + ("" if job.ended_at is not None else " …"), job.title,
                          canary.name if canary else "-", Text(status[:100], style=style),
                          key=str(job.id))
        self._order = [j.id for j in jobs]
        if chosen is not None and chosen.id in self._order:
            table.move_cursor(row=self._order.index(chosen.id), animate=False)
        self.show_steps()
        self._show_status()
        self.refresh_bindings()

    def _show_status(self) -> None:
        """How many run and ended, and the selected rollout's whole status (never cut)."""
        jobs = self.console.rollouts.jobs
        running = len(self.console.rollouts.running())
        text = Text(f"{running} running, {len(jobs) - running} ended" if jobs else
                    "no rollout in this session yet (D on the fleet starts one)")
        job = self.selected
        if job is not None:
            text.append(f"\n#{job.id} {job.title}: {job.status()}")
        self.query_one("#rollouts-status", Static).update(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "rollouts-table":
            self.show_steps()
            self._show_status()
        elif event.data_table.id == "rollout-steps":
            self.show_step_detail(event.cursor_row)

    def show_steps(self) -> None:
        """Every target of the selected rollout with its steps (time since the rollout
        started in ``+``); the highlighted row's detail is shown in full below the table."""
        table = self.query_one("#rollout-steps", DataTable)
        row = table.cursor_row
        table.clear()
        self._details: list[str] = []
        job = self.selected
        if job is None:
            self.show_step_detail(-1)
            return
        for p in job.targets.values():
            phase = Text(p.phase.value, style=PHASE_STYLES[p.phase])
            name = p.name + (" (canary)" if p.canary else "")
            table.add_row(name, phase, "-", "", "", "", _cut(p.message or ""))
            self._details.append(f"{name}: {p.phase.value}" + (f": {p.message}" if p.message
                                                                  else ""))
            for s in p.steps:
                table.add_row("", "", s.step, Text("ok", style="green") if s.ok else
                              Text("FAILED", style="bold red"), _clock(s.at),
                              f"+{elapsed(s.at - job.started_at)}" if s.at else "",
                              _cut(s.message))
                self._details.append(f"{name} {s.step}: {s.message}")
        if 0 <= row < table.row_count:
            table.move_cursor(row=row, animate=False)
        self.show_step_detail(table.cursor_row)

    def show_step_detail(self, row: int) -> None:
        """The whole detail of step row ``row`` (a refusal keeps its fix), wrapped."""
        details = getattr(self, "_details", [])
        self.query_one("#rollout-step-detail", Static).update(
            Text(details[row]) if 0 <= row < len(details) else "")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_rollout":
            job = self.selected
            return job is not None and job.running and not self.console.read_only
        return super().check_action(action, parameters)

    def action_cancel_rollout(self) -> None:
        job = self.selected
        if job is None or not job.running:
            return

        def confirmed(yes: bool | None) -> None:
            if yes and self.console.rollouts.cancel(job.id):
                self.notify(f"rollout #{job.id}: cancelling (the upload in flight finishes)")

        self.app.push_screen(ConfirmScreen(
            "Cancel rollout", f"Stop rollout #{job.id} ({job.title})? A canary still under "
            "watch is rolled back; agents not started yet are left alone.",
            yes="Stop rollout"), confirmed)
