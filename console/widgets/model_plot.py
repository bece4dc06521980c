"""Live throughput, latency and errors of one model: sparklines with their latest values."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Sparkline

from console.agent_view import Series


class ModelPlot(Vertical):
    """``req/s``, ``p95 ms`` and ``err/s`` of one model over the live window."""

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
        with Horizontal(classes="plot-row"):
            yield Label("err/s   -", classes="plot-label", id="err-label")
            yield Sparkline([], id="err", summary_function=max)

    def on_mount(self) -> None:
        self._ready = True  # children are composed by now
        if self._series is not None:
            self.show(self._series)

    def show(self, series: Series) -> None:
        """Draw ``series`` (the newest values in the labels); kept until mounted."""
        self._series = series
        if not self._ready:
            return
        rps, p95, err = list(series.rps), list(series.p95_ms), list(series.errors)
        self.query_one("#rps", Sparkline).data = rps
        self.query_one("#p95", Sparkline).data = p95
        self.query_one("#err", Sparkline).data = err
        self.query_one("#rps-label", Label).update(f"req/s {rps[-1]:7.1f}" if rps else "req/s -")
        idle = not rps or rps[-1] == 0
        self.query_one("#p95-label", Label).update(
            "p95 ms  -" if idle else f"p95 ms{p95[-1]:7.2f}")
        errors = f"err/s {err[-1]:7.1f}" if err else "err/s   -"
        self.query_one("#err-label", Label).update(
            f"[bold red]{errors}[/]" if err and err[-1] > 0 else errors)
