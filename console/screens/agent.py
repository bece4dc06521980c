"""The agent screen: model versions (which is active), live throughput/latency per model,
system load, deployment history and recent events of one agent."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.markup import escape
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Header, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from console.agent_view import (
    AgentSnapshot,
    LiveMetrics,
    cache_cell,
    format_bytes,
    step_lines,
    system_line,
)
from console.commands import last_tuning
from console.errors import ConsoleError
from console.fetches import STALL_S, Fetches
from console.fleet import AgentState, FleetAgent, format_ago, format_duration
from console.messages import ActionFinished, AgentSnapshotReady, HistoryArrived, MetricsArrived
from console.plot_data import RANGES, PlotData, PlotRange
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmScreen
from console.screens.rollback import RollbackScreen
from console.screens.settings import SettingsScreen
from console.widgets.console_footer import ConsoleFooter
from console.widgets.fleet_table import STATE_STYLES
from console.widgets.metric_plots import DevicePlots, ModelPlots
from edge_agent.client.agent_client import AgentClient, ManagementError
from edge_agent.client.types import DeployResult, MetricPoint, MetricsSample, SystemPoint

WATCH_RETRY_S = 2.0
HISTORY_RETRY_S = 5.0  # a failed history query is asked again after this
HISTORY_TRIES = 3  # then the plots go on with live seconds only (t asks again)


STALE_STATES = frozenset({AgentState.OFFLINE, AgentState.UNREACHABLE, AgentState.AUTH_FAILED})


def _clock(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%H:%M:%S", time.gmtime(ts))


def device_history(client: AgentClient, start: float, end: float,
                   step_s: int) -> list[object]:
    """The agent's stored device samples; [] from an agent that predates QuerySystemMetrics."""
    try:
        return list(client.query_system(start=start, end=end, step_s=step_s))
    except ManagementError as exc:
        if exc.status == "UNIMPLEMENTED":
            return []
        raise


class AgentScreen(ConsoleScreen):
    """One agent, by fleet key. ``live=False`` never contacts it (snapshot tests feed data)."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", tooltip="Back to the fleet"),
        Binding("r", "rollback", "Rollback", tooltip="Roll the selected model back"),
        Binding("a", "activate", "Activate", tooltip="Make the selected version active"),
        Binding("x", "remove", "Remove", tooltip="Delete the selected (inactive) version"),
        Binding("D", "deploy_here", "Deploy", tooltip="Deploy a bundle to this agent"),
        Binding("S", "settings", "Settings",
                tooltip="Edit the selected model's live settings"),
        Binding("h", "history", "History", tooltip="Past throughput and latency"),
        Binding("l", "logs", "Log", tooltip="The agent's own log (its recent lines, followed)"),
        Binding("e", "events", "Events", tooltip="This agent's recent events (console side)"),
        Binding("c", "doctor", "Doctor", tooltip="The agent's device checks, with fixes"),
        Binding("d", "details", "Details", tooltip="Everything known about this agent"),
        Binding("t", "next_range", "Range", tooltip="Plot range: 5 min, 1 h, 24 h"),
        Binding("ctrl+r", "refresh", "Refresh", show=False, tooltip="Ask the agent now"),
    ]

    def __init__(self, key: str, *, live: bool = True) -> None:
        super().__init__()
        self.key = key
        self.live = live
        self.snapshot = AgentSnapshot()
        self.metrics = LiveMetrics()
        self.busy = ""  # the change in flight, shown in the status line
        self.plot_data = PlotData()
        self._plots: dict[str, ModelPlots] = {}
        self._last_sample_at: float | None = None
        self._refresh_now = asyncio.Event()
        self.fetches = Fetches()  # background fetches that failed or stalled are shown

    # -- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="agent-summary")
        yield Static(system_line(None), id="agent-system")
        yield Static("live metrics: waiting for samples", id="plot-summary")
        with Vertical(id="agent-main"):
            yield DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
            with Vertical(id="plots"):
                yield Static(self._range_line(), id="plots-range")
                with VerticalScroll(id="plots-scroll"):
                    yield Static("metrics: asking the agent for its history", id="plots-empty")
                    # the models the fleet knows get their plots now (shown once they have
                    # data): the history's arrival then only draws, nothing is mounted
                    for model in self._known_models():
                        plot = self._plots[model] = ModelPlots(model)
                        plot.display = False
                        yield plot
                # below the models, never scrolled away by them: CPU, memory, temperature
                yield DevicePlots(id="device-plots")
        with TabbedContent(id="agent-tabs"):
            with TabPane("Deployments", id="tab-deployments"):
                yield DataTable(id="deployments-table", cursor_type="row")
            with TabPane("Events", id="tab-events"):
                yield DataTable(id="agent-events", cursor_type="row")
        yield Static("", id="agent-fetches")  # fetches that failed or stalled, with their age
        yield Static("", id="agent-status")
        yield ConsoleFooter()

    def _known_models(self) -> list[str]:
        """The models the fleet's last probe saw active on this agent."""
        agent = self.agent
        return sorted({m.rpartition(":")[0] for m in agent.models} if agent else set())

    @property
    def agent(self) -> FleetAgent | None:
        """The fleet's row of this agent."""
        return self.console.fleet.get(self.key)

    def on_mount(self) -> None:
        self.query_one("#models-table", DataTable).add_columns(
            "MODEL", "VERSION", "ACTIVE", "STATE", "BACKEND", "LOAD", "SIZE", "CACHE",
            "ADDED (UTC)")
        self.query_one("#deployments-table", DataTable).add_columns(
            "STARTED", "MODEL", "KIND", "FROM→TO", "STATUS", "LAST STEP", "REASON")
        self.query_one("#agent-events", DataTable).add_columns("TIME (UTC)", "EVENT")
        self._render_summary()
        self.set_interval(1.0, self.show_fetches)
        if self.live and self.console.poll_enabled:
            self.refresh_loop()
            self.load_history(self.plot_data.range.label)
            self.watch_loop()
        else:
            self.plot_data.add_history({}, 0.0)  # nothing to ask: samples fed in go straight in

    # -- workers -------------------------------------------------------------------------------
    def _call(self, fn: Callable[[AgentClient], Any]) -> Any:
        agent = self.agent
        if agent is None:
            raise ConsoleError("the agent is no longer listed")
        return self.console.connections.call(agent, fn)

    def fetch(self) -> AgentSnapshot:
        """Ask the agent for its info, versions and history (blocking; run in a thread)."""
        try:
            info = self._call(lambda c: c.info())
            versions = self._call(lambda c: c.models())
            deployments = self._call(lambda c: c.deployments(limit=30))
            tuning = self._call(last_tuning)
        except ConsoleError as exc:
            return AgentSnapshot(self.snapshot.info, self.snapshot.versions,
                                 self.snapshot.deployments, error=str(exc),
                                 fetched_at=self.snapshot.fetched_at,
                                 tuning=self.snapshot.tuning)
        return AgentSnapshot(info, tuple(versions), tuple(deployments), fetched_at=time.time(),
                             tuning=tuple(tuning))

    @work(exclusive=True, group="agent-refresh", exit_on_error=False)
    async def refresh_loop(self) -> None:
        """Poll the agent; the next poll starts only after the last one finished (after the
        poll interval, or at once when :meth:`action_refresh` asks)."""
        while True:
            self.fetches.started("agent state")
            snapshot = await asyncio.to_thread(self.fetch)
            if snapshot.error:
                self.fetches.failed("agent state", snapshot.error)
            else:
                self.fetches.answered("agent state")
            self.post_message(AgentSnapshotReady(self.key, snapshot))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._refresh_now.wait(),
                                       self.console.settings.poll_interval_s)
            self._refresh_now.clear()

    @work(thread=True, exclusive=True, group="agent-watch", exit_on_error=False)
    def watch_loop(self) -> None:
        """Follow WatchMetrics (one sample a second); reconnect after an error."""
        worker = get_current_worker()
        while not worker.is_cancelled:
            try:
                self.fetches.started("live metrics")
                stream = self._call(lambda c: c.watch_metrics())
                for sample in stream:
                    if worker.is_cancelled:
                        stream.close()
                        return
                    self.fetches.answered("live metrics")
                    self.fetches.started("live metrics")  # the next second is due
                    self.post_message(MetricsArrived(self.key, sample))
                self.fetches.failed("live metrics", "the agent ended the stream")
            except (ConsoleError, ManagementError) as exc:
                self.fetches.failed("live metrics", str(exc))
                self.post_message(MetricsArrived(self.key, None, str(exc)))
            for _ in range(int(WATCH_RETRY_S * 10)):
                if worker.is_cancelled:
                    return
                time.sleep(0.1)

    @work(thread=True, exclusive=True, group="agent-action", exit_on_error=False)
    def run_change(self, title: str, fn: Callable[[AgentClient], DeployResult]) -> None:
        """Make one change on the agent and report how it ended."""
        self.fetches.started(title)
        try:
            result = self._call(fn)
        except ConsoleError as exc:
            self.fetches.forget(title)  # said in the status line
            self.post_message(ActionFinished(self.key, title, False, str(exc)))
            return
        self.fetches.forget(title)
        self.post_message(ActionFinished(self.key, title, result.ok, result.message))

    # -- rendering -----------------------------------------------------------------------------
    def on_agent_snapshot_ready(self, message: AgentSnapshotReady) -> None:
        assert isinstance(message.snapshot, AgentSnapshot)
        self.show_snapshot(message.snapshot)

    def on_metrics_arrived(self, message: MetricsArrived) -> None:
        if message.sample is None:
            text = f"live metrics stopped: {message.error}"
            if self._last_sample_at is not None:
                text += f" (plots below are from {format_ago(time.time() - self._last_sample_at)})"
            self.query_one("#agent-system", Static).update(Text(text, style="red"))
            self.query_one("#plots").add_class("stale")
            return
        assert isinstance(message.sample, MetricsSample)
        self.add_sample(message.sample)

    def show_snapshot(self, snapshot: AgentSnapshot) -> None:
        """Render one poll of the agent."""
        self.snapshot = snapshot
        self._render_summary()
        self._render_models()
        self._render_deployments()
        self._render_events()

    def add_sample(self, sample: MetricsSample) -> None:
        """Fold a live sample into the plots and the system line."""
        self.metrics.add(sample)
        self.plot_data.add_sample(sample)
        self._last_sample_at = time.time()
        self.query_one("#agent-system", Static).update(system_line(self.metrics.system))
        self.query_one("#plots").remove_class("stale")
        self.query_one("#plot-summary", Static).update(self.metrics.summary_line())
        self.draw_plots()

    def add_history(self, points: dict[str, list[MetricPoint]], until: float,
                    system: Sequence[SystemPoint] = ()) -> None:
        """The stored history of the current range arrived: the plots start from it."""
        self.plot_data.add_history(points, until, system)
        self.draw_plots()

    def draw_plots(self) -> None:
        """Redraw every plot from the plot data (skipped while the plot pane is hidden)."""
        scroll = self.query_one("#plots-scroll", VerticalScroll)
        models = self.plot_data.model_names()
        for placeholder in scroll.query("#plots-empty").results(Static):
            if models:
                placeholder.remove()
            elif self.plot_data.history_loaded:
                placeholder.update(f"metrics: no requests in the last {self.plot_data.range.label}")
        for model in models:
            if model not in self._plots:
                plot = self._plots[model] = ModelPlots(model)
                plot.draw(self.plot_data, self.metrics.series.get(model))  # drawn once mounted
                scroll.mount(plot)
        for model, plot in self._plots.items():  # compact: the summary line stands in
            plot.display = model in models
            plot.draw(self.plot_data, self.metrics.series.get(model), plots=not self.compact)
        if self.compact:
            return
        device = self.query_one("#device-plots", DevicePlots)
        device.display = bool(self.plot_data.device)  # shown from the first system sample
        if device.display and device.is_mounted:
            device.draw(self.plot_data)

    def on_compact_changed(self, compact: bool) -> None:
        if not compact and self.is_mounted:
            self.call_after_refresh(self.draw_plots)

    def _range_line(self) -> str:
        names = " / ".join(f"[b]{r.label}[/b]" if r == self.plot_data.range else r.label
                           for r in RANGES)
        return f"range {names}  (t switches)"

    def action_next_range(self) -> None:
        """Switch the plots to the next time range and ask the agent for its history."""
        index = RANGES.index(self.plot_data.range)
        self.fetches.forget(f"history ({self.plot_data.range.label})")
        self.plot_data.reset(RANGES[(index + 1) % len(RANGES)])
        self.query_one("#plots-range", Static).update(self._range_line())
        for plot in self._plots.values():
            plot.remove()
        self._plots.clear()
        if self.live and self.console.poll_enabled:
            self.load_history(self.plot_data.range.label)
        else:
            self.plot_data.add_history({}, 0.0)
        self.draw_plots()

    @work(thread=True, exclusive=True, group="agent-history", exit_on_error=False)
    def load_history(self, label: str) -> None:
        """QueryMetrics of every model on the agent for the plot range ``label``; a failure is
        shown with its age and asked again (``HISTORY_TRIES`` in all, then live only)."""
        plot_range = next(r for r in RANGES if r.label == label)
        name = f"history ({label})"
        worker = get_current_worker()
        for attempt in range(1, HISTORY_TRIES + 1):
            until = time.time()
            self.fetches.started(name)
            try:
                points, system = self._query_history(plot_range, until)
            except (ConsoleError, ManagementError) as exc:
                if worker.is_cancelled:
                    return
                self.fetches.failed(name, str(exc))
                if attempt == HISTORY_TRIES:
                    self.fetches.forget(name)
                    self.post_message(HistoryArrived(
                        self.key, label, {}, until, f"{exc} (asked {HISTORY_TRIES} times; the "
                        "plots show live seconds only, t asks again)"))
                    return
                for _ in range(int(HISTORY_RETRY_S * 10)):
                    if worker.is_cancelled:
                        return
                    time.sleep(0.1)
                continue
            self.fetches.answered(name)
            self.post_message(HistoryArrived(self.key, label, points, until, system=system))
            return

    def _query_history(self, plot_range: PlotRange, until: float
                       ) -> tuple[dict[str, list[object]], Any]:
        """Stored points of every model and of the device over ``plot_range`` up to ``until``."""
        # the fleet's probe already knows the active models: one call less
        models = self._known_models() or sorted(
            {v.model for v in self._call(lambda c: c.models())})

        def query(c: AgentClient) -> dict[str, list[object]]:
            return {m: list(c.query_metrics(m, start=until - plot_range.span_s, end=until,
                                            step_s=plot_range.step_s)) for m in models}

        points = self._call(query)
        system = self._call(lambda c: device_history(c, until - plot_range.span_s, until,
                                                     plot_range.step_s))
        return points, system

    def show_fetches(self) -> None:
        """Show every background fetch that failed or stalled, with its age (each second)."""
        lines = self.fetches.problems()
        if self._last_sample_at is not None and self.live:
            quiet = time.time() - self._last_sample_at
            if quiet > STALL_S and not any(x.startswith("live metrics") for x in lines):
                lines.append(f"live metrics: no sample for {format_duration(quiet)} "
                             "(plots are not moving)")
        box = self.query_one("#agent-fetches", Static)
        box.display = bool(lines)
        box.update(Text("\n".join(lines), style="bold red"))

    def on_history_arrived(self, message: HistoryArrived) -> None:
        if message.range_label != self.plot_data.range.label or self.plot_data.history_loaded:
            return  # an answer for a range no longer shown
        if message.error:
            self._status(f"[red]history: {escape(message.error)}[/]")
        points = {m: [p for p in ps if isinstance(p, MetricPoint)]
                  for m, ps in message.points.items()}
        self.add_history(points, message.until,
                         [p for p in message.system if isinstance(p, SystemPoint)])

    def _render_summary(self) -> None:
        agent = self.agent
        if agent is None:
            return
        self.sub_title = agent.name
        info = self.snapshot.info
        style = STATE_STYLES[agent.state]
        line = (f"[b]{escape(agent.name)}[/b]  [{style}]{agent.state.value}[/]  {agent.address}  "
                f"{agent.arch or '-'}  {agent.profile or '-'}")
        if info is not None:
            line += (f"  agent {info.agent_version}  up {info.uptime_s / 60:.0f} min  "
                     f"runtimes {', '.join(info.runtimes) or '-'}")
        for tuned in self.snapshot.tuning_lines():
            line += f"\n[dim]{escape(tuned)}[/]"
        if self.snapshot.error or agent.message:
            line += f"\n[red]{escape(self.snapshot.error or agent.message)}[/]"
        age = self._stale_age()
        if age is not None and (self.snapshot.versions or info is not None):
            line += f"\n[dim]stale: the data below is from {format_ago(age)}[/]"
        self.query_one("#agent-summary", Static).update(line)

    def _stale_age(self) -> float | None:
        """How old the shown data is when the agent cannot be asked now (None: live)."""
        now = time.time()
        age = self.snapshot.stale_for(now)
        agent = self.agent
        if age is None and agent is not None and agent.state in STALE_STATES:
            fetched = self.snapshot.fetched_at
            age = None if fetched is None else max(0.0, now - fetched)
        return age

    def _render_models(self) -> None:
        table = self.query_one("#models-table", DataTable)
        selected = self.selected_version()
        table.clear()
        rows = sorted(self.snapshot.versions, key=lambda v: (v.model, -v.version))
        stale = self._stale_age() is not None  # shown dimmed: not what the agent says now
        for v in rows:
            cells: list[str | Text] = [
                Text(v.model, style="bold"), str(v.version),
                Text("● active", style="green") if v.active else "",
                Text(v.state, style="red" if v.load_error or v.state == "failed" else ""),
                v.backend or "-",
                f"{v.load_ms:.0f} ms" if v.load_ms else "-", format_bytes(v.size_bytes),
                cache_cell(v), _clock(v.added_at)]
            if stale:
                cells = [Text(c.plain if isinstance(c, Text) else c, style="dim") for c in cells]
            table.add_row(*cells, key=f"{v.model}:{v.version}")
        if selected is not None:
            keys = [f"{v.model}:{v.version}" for v in rows]
            wanted = f"{selected[0]}:{selected[1]}"
            if wanted in keys:
                table.move_cursor(row=keys.index(wanted), animate=False)

    def _render_deployments(self) -> None:
        table = self.query_one("#deployments-table", DataTable)
        table.clear()
        for d in self.snapshot.deployments:
            ok = d.status == "committed"
            table.add_row(_clock(d.started_at), d.model, d.kind,
                          f"v{d.from_version or '-'}→v{d.to_version or '-'}",
                          Text(d.status, style="green" if ok else "red"), d.last_step or "-",
                          (d.reason or "-")[:60])

    def _render_events(self) -> None:
        table = self.query_one("#agent-events", DataTable)
        table.clear()
        agent = self.agent
        name = agent.name if agent else ""
        rows = [(e.at, e.text, e.level != "error")
                for e in self.console.fleet.events if e.agent == name]
        rows += step_lines(self.snapshot.deployments)
        for at, text, ok in sorted(rows, key=lambda r: r[0], reverse=True)[:100]:
            table.add_row(_clock(at), Text(text, style="" if ok else "red"))

    def _status(self, text: str) -> None:
        self.query_one("#agent-status", Static).update(text)

    # -- actions -------------------------------------------------------------------------------
    def selected_version(self) -> tuple[str, int] | None:
        """(model, version) of the row under the cursor."""
        table = self.query_one("#models-table", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value or ""
        model, _, version = key.rpartition(":")
        return (model, int(version)) if version.isdigit() else None

    def _start(self, title: str, fn: Callable[[AgentClient], DeployResult]) -> None:
        self.busy = title
        self._status(f"[b]{escape(title)}…[/b]")
        self.console.fleet.log(self.agent.name if self.agent else "", "info", f"{title}: started")
        self.run_change(title, fn)

    def on_action_finished(self, message: ActionFinished) -> None:
        self.busy = ""
        style = "green" if message.ok else "red"
        self._status(f"[{style}]{escape(message.title)}: {escape(message.message)}[/]")
        self.console.fleet.log(self.agent.name if self.agent else "",
                               "info" if message.ok else "error",
                               f"{message.title}: {message.message}")
        self.notify(f"{message.title}: {message.message}",
                    severity="information" if message.ok else "error")
        self.action_refresh()
        self.console.poll_agents()

    def action_rollback(self) -> None:
        picked = self.selected_version()
        models = self.snapshot.models()
        model = picked[0] if picked else (models[0] if models else None)
        if model is None:
            self.notify("No model on this agent", severity="warning")
            return
        name = self.agent.name if self.agent else self.key

        def chosen(version: int | None) -> None:
            if version is not None:
                self._start(f"roll back {model} to v{version}",
                            lambda c: c.rollback(model, version))

        self.app.push_screen(RollbackScreen(name, model, self.snapshot), chosen)

    def action_activate(self) -> None:
        picked = self.selected_version()
        if picked is None:
            return
        model, version = picked
        if self.snapshot.active_version(model) == version:
            self.notify(f"{model} v{version} is already active", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._start(f"activate {model} v{version}", lambda c: c.activate(model, version))

        self.app.push_screen(ConfirmScreen(
            "Activate", f"Switch {model} on {self.sub_title} to version {version}?",
            yes="Activate"), confirmed)

    def action_remove(self) -> None:
        picked = self.selected_version()
        if picked is None:
            return
        model, version = picked
        if self.snapshot.active_version(model) == version:
            self.notify("The active version cannot be removed; roll back first",
                        severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._start(f"remove {model} v{version}", lambda c: c.remove(model, version))

        self.app.push_screen(ConfirmScreen(
            "Remove", f"Delete {model} version {version} from {self.sub_title}'s disk? "
            "It can no longer be rolled back to.", yes="Remove"), confirmed)

    def action_settings(self) -> None:
        picked = self.selected_version()
        models = self.snapshot.models()
        model = picked[0] if picked else (models[0] if models else None)
        if model is None:
            self.notify("No model on this agent", severity="warning")
            return
        self.open_settings(model)

    @work(thread=True, exclusive=True, group="agent-settings", exit_on_error=False)
    def open_settings(self, model: str) -> None:
        """Ask the agent for ``model``'s settings, then show them in the settings modal."""
        try:
            current = self._call(lambda c: c.model_settings(model))
        except (ConsoleError, ManagementError) as exc:
            self.app.call_from_thread(self.notify, f"settings of {model}: {exc}",
                                      severity="error")
            return
        name = self.agent.name if self.agent else self.key

        def chosen(values: dict[str, str] | None) -> None:
            if values is not None:
                self._start(f"settings of {model}",
                            lambda c: c.set_model_settings(model, values, replace=True))

        self.app.call_from_thread(self.app.push_screen,
                                  SettingsScreen(name, model, current), chosen)

    def action_deploy_here(self) -> None:
        self.console.open_deploy(preselect=[self.key])

    def action_history(self) -> None:
        self.console.open_history(self.key)

    def action_events(self) -> None:
        self.query_one(TabbedContent).active = "tab-events"

    def action_details(self) -> None:
        if self.agent is not None:
            self.console.show_details(self.agent)

    def action_logs(self) -> None:
        from console.screens.agent_log import AgentLogScreen

        self.app.push_screen(AgentLogScreen(self.key))

    def action_doctor(self) -> None:
        from console.screens.doctor import DoctorScreen

        self.app.push_screen(DoctorScreen(self.key))

    def action_refresh(self) -> None:
        self._refresh_now.set()  # the loop asks again once the fetch in flight is done
