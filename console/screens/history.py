"""The history screen: past throughput, latency, errors, batch size and queue time of one
agent's models (QueryMetrics), in the same plots as the agent view."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rich.markup import escape
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Header, Label, Select, Static

from console.errors import ConsoleError
from console.fetches import Fetches
from console.plot_data import PlotData, PlotRange
from console.screens.base import ConsoleScreen
from console.widgets.console_footer import ConsoleFooter
from console.widgets.metric_plots import ModelPlots
from edge_agent.client.agent_client import AgentClient
from edge_agent.client.types import MetricPoint

T = TypeVar("T")
RETRY_S = 5.0  # a failed model list or query is asked again after this

# label, seconds back, rollup step in seconds, time axis labels
RANGES = (PlotRange("last 15 min", 900, 10, "%H:%M"), PlotRange("last hour", 3600, 60, "%H:%M"),
          PlotRange("last 6 hours", 21600, 300, "%H:%M"),
          PlotRange("last day", 86400, 900, "%H:%M"),
          PlotRange("last week", 604800, 3600, "%m-%d"))


@dataclass
class HistoryLoaded(Message):
    """QueryMetrics answered (``error`` set when it failed)."""

    model: str
    points: list[MetricPoint]
    error: str = ""


@dataclass
class ModelsLoaded(Message):
    """The agent's model names (for the model picker)."""

    models: list[str]
    error: str = ""


def _v(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


class HistoryScreen(ConsoleScreen):
    """Pick a model and a time range; shows the rolled-up points and two sparklines."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back", tooltip="Back"),
                Binding("ctrl+r", "reload", "Reload", tooltip="Query again")]

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.points: list[MetricPoint] = []
        self.fetches = Fetches()  # a model list or a query that failed or stalled is shown

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="history-options"):
            yield Label("model", classes="option-label")
            yield Select[str]([], id="history-model", prompt="model")
            yield Label("range", classes="option-label")
            yield Select[int]([(r.label, i) for i, r in enumerate(RANGES)],
                              value=1, allow_blank=False, id="history-range")
        yield VerticalScroll(id="history-plots")
        yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="history-fetches")
        yield Static("", id="history-status")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        agent = self.console.fleet.get(self.key)
        self.sub_title = f"history of {agent.name if agent else self.key}"
        table = self.query_one(DataTable)
        # fixed widths: a refill never cuts TIME nor moves a header off its column
        for title, width in (("TIME (UTC)", 14), ("REQUESTS", 9), ("REQ/S", 9), ("ERRORS", 7),
                             ("BATCH", 6), ("P50 MS", 8), ("P95 MS", 8), ("P99 MS", 8)):
            table.add_column(title, width=width)
        self.set_interval(1.0, self.show_fetches)
        if self.console.poll_enabled:
            self.load_models()

    def show_fetches(self) -> None:
        """Show the model list or query that failed or stalled, with its age (each second)."""
        lines = self.fetches.problems()
        box = self.query_one("#history-fetches", Static)
        box.display = bool(lines)
        box.update(Text("\n".join(lines), style="bold red"))

    def _call(self, fn: Callable[[AgentClient], T]) -> T:
        agent = self.console.fleet.get(self.key)
        if agent is None:
            raise ConsoleError("the agent is no longer listed")
        return self.console.connections.call(agent, fn)

    @work(thread=True, exclusive=True, group="history-models", exit_on_error=False)
    def load_models(self) -> None:
        """Ask the agent which models it has (asked again every ``RETRY_S`` while it fails)."""
        self.fetches.started("models")
        try:
            versions = self._call(lambda c: c.models())
        except ConsoleError as exc:
            self.fetches.failed("models", str(exc))
            self.post_message(ModelsLoaded([], str(exc)))
            return
        self.fetches.answered("models")
        self.post_message(ModelsLoaded(sorted({v.model for v in versions})))

    def on_models_loaded(self, message: ModelsLoaded) -> None:
        if message.error:
            self._status(message.error, error=True)
            self.set_timer(RETRY_S, self.load_models)
            return
        select = self.query_one("#history-model", Select)
        select.set_options([(m, m) for m in message.models])
        if message.models:
            select.value = message.models[0]
        else:
            self._status("no models on this agent yet")

    def on_select_changed(self, _: Select.Changed) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        model = self.query_one("#history-model", Select).value
        index = self.query_one("#history-range", Select).value
        if not isinstance(model, str) or not isinstance(index, int):
            return
        r = RANGES[index]
        self._status(f"querying {model}, {r.label}…")
        now = time.time()
        self.query_history(model, now - r.span_s, now, r.step_s)

    @work(thread=True, exclusive=True, group="history-query", exit_on_error=False)
    def query_history(self, model: str, start: float, end: float, step_s: int) -> None:
        """QueryMetrics for one model and range (rolled up to ``step_s``)."""
        self.fetches.started("query")
        try:
            points = self._call(lambda c: c.query_metrics(model, start=start, end=end,
                                                          step_s=step_s))
        except ConsoleError as exc:
            self.fetches.failed("query", str(exc))
            self.post_message(HistoryLoaded(model, [], str(exc)))
            return
        self.fetches.answered("query")
        self.post_message(HistoryLoaded(model, list(points)))

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        if message.error:
            self._status(message.error, error=True)
            self.set_timer(RETRY_S, self.action_reload)
            return
        index = self.query_one("#history-range", Select).value
        self.show_points(message.model, message.points,
                         RANGES[index if isinstance(index, int) else 1], time.time())

    def show_points(self, model: str, points: list[MetricPoint], plot_range: PlotRange,
                    until: float) -> None:
        """Render the points of ``model`` queried over ``plot_range`` up to ``until``."""
        self.points = sorted(points, key=lambda p: p.ts)
        data = PlotData(plot_range)
        data.add_history({model: self.points}, until)
        data.newest = max(data.newest, int(until))  # the time axis ends at the query's end
        pane = self.query_one("#history-plots", VerticalScroll)
        pane.remove_children()
        plots = ModelPlots(model)
        plots.draw(data)
        pane.mount(plots)
        table = self.query_one(DataTable)
        table.clear()
        for p in reversed(self.points):
            table.add_row(time.strftime("%m-%d %H:%M:%S", time.gmtime(p.ts)), str(p.requests),
                          f"{p.requests_per_s:.2f}", str(p.errors), _v(p.mean_batch, "{:.1f}"),
                          _v(p.p50_ms), _v(p.p95_ms), _v(p.p99_ms))
        total = sum(p.requests for p in self.points)
        self._status(f"{model}: {len(self.points)} point(s), {total} request(s)"
                     if self.points else f"{model}: no requests in this range")

    def _status(self, text: str, *, error: bool = False) -> None:
        self.query_one("#history-status", Static).update(
            f"[red]{escape(text)}[/]" if error else escape(text))
