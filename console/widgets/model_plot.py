"""Live throughput and latency of one model: two sparklines with their latest values."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Sparkline

from console.agent_view import Series


class ModelPlot(Vertical):
    """``req/s`` and ``p95 ms`` of one model over the live window."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        super().__init__(classes="model-plot", **kwargs)
        self.model = model
        self._series: Series | None = None
        self._ready = False

    def compose(self) -> ComposeResult:
        yield Label(self.model, classes="plot-title")
        with Horizontal(classes="plot-row"):
            yield Label("req/s   -", classes="plot-label", id="rps-label")
            yield Sparkline([], id="rps", summary_function=max)
        with Horizontal(classes="plot-row"):
            yield Label("p95 ms  -", classes="plot-label", id="p95-label")
            yield Sparkline([], id="p95", summary_function=max)

    def on_mount(self) -> None:
        self._ready = True  # children are composed by now
        if self._series is not None:
            self.show(self._series)

    def show(self, series: Series) -> None:
        """Draw ``series`` (the newest values in the labels); kept until mounted."""
        self._series = series
        if not self._ready:
            return
        rps, p95 = list(series.rps), list(series.p95_ms)
        self.query_one("#rps", Sparkline).data = rps
        self.query_one("#p95", Sparkline).data = p95
        self.query_one("#rps-label", Label).update(f"req/s {rps[-1]:7.1f}" if rps else "req/s -")
        self.query_one("#p95-label", Label).update(
            f"p95 ms{p95[-1]:7.2f}" if p95 else "p95 ms -")
