"""Plots with axes and units (textual-plotext): one model's requests, latency, errors, batch size
and queue time, and the device's CPU, memory and temperature, over one time range."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from textual.app import ComposeResult, RenderResult
from textual.containers import Grid, Vertical
from textual.widgets import Label
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from console.agent_view import Series
from console.plot_data import PlotData, PlotRange, segments

Line = tuple[str, str, Sequence[tuple[int, float]]]  # (label, colour, (time, value) points)


def time_ticks(newest: int, plot_range: PlotRange,
               count: int = 4) -> tuple[list[float], list[str]]:
    """Time axis ticks over the range ending at ``newest``, labelled in UTC."""
    start = newest - plot_range.span_s
    positions = [float(start + plot_range.span_s * i // (count - 1)) for i in range(count)]
    return positions, [time.strftime(plot_range.tick_format, time.gmtime(p)) for p in positions]


class TimePlot(PlotextPlot):
    """One plot over time: a title with its unit, lines, a y axis from zero."""

    def __init__(self, title: str, unit: str, *, classes: str = "") -> None:
        super().__init__(classes=f"time-plot {classes}".strip())
        self.title = title
        self.unit = unit
        self.drawn = False  # True once lines with at least one point were drawn
        self._drawing: tuple[list[Line], int, PlotRange, int] | None = None
        self._rendered: tuple[object, RenderResult] | None = None  # (what, how it looked)
        self.painted_at: float | None = None  # perf_counter of the first render with data

    def draw(self, lines: Sequence[Line], newest: int, plot_range: PlotRange,
             gap_s: int = 0) -> None:
        """Replace the plot's lines (each (label, colour, points)) and redraw; neighbours more
        than ``gap_s`` (default: the range's step) apart are not joined."""
        self._drawing = (list(lines), newest, plot_range, gap_s or plot_range.step_s)
        self.drawn = any(points for _, _, points in lines)
        self.refresh()

    def render(self) -> RenderResult:
        # built afresh for new lines or a new size (no state of an earlier figure carries
        # over), else the last drawing again: a screen repaint does not rebuild eight plots
        key = (self._drawing, self.size, self.app.theme)
        if self._rendered is None or self._rendered[0] != key:
            self._plot = self._figure()
            self._rendered = (key, super().render())
            if self.drawn and self.painted_at is None:
                self.painted_at = time.perf_counter()
        return self._rendered[1]

    def _figure(self) -> Plot:
        plt = Plot()
        if self._drawing is None:
            plt.title(f"{self.title} ({self.unit})")
            return plt
        lines, newest, plot_range, gap_s = self._drawing
        top = 0.0
        for label, colour, points in lines:
            if not points:
                continue
            top = max(top, *(v for _, v in points))
            for i, run in enumerate(segments(points, gap_s)):  # gaps stay gaps
                plt.plot([float(ts) for ts, _ in run], [v for _, v in run],
                         label=label if len(lines) > 1 and i == 0 else None, color=colour,
                         marker="braille")
        plt.title(f"{self.title} ({self.unit})" if self.drawn
                  else f"{self.title} ({self.unit}): no data")
        if newest:
            positions, labels = time_ticks(newest, plot_range)
            margin = plot_range.span_s / 50  # edge ticks stay inside the plot at any width
            plt.xlim(positions[0] - margin, positions[-1] + margin)
            plt.xticks(positions, [""] * len(positions))  # labelled below: plotext places
            plt.xlabel(f"{labels[0]} … {labels[-1]} UTC")  # tick labels unsteadily
        plt.ylim(0, top * 1.1 if top > 0 else 1.0)
        return plt


def headline(model: str, latest: Series | None) -> str:
    """The model's newest live second in words (markup): rate, p95 latency, errors."""
    if latest is None or not latest.ts:
        return f"[b]{model}[/b]"
    rps, p95, err = latest.rps[-1], latest.p95_ms[-1], latest.errors[-1]
    text = f"[b]{model}[/b]  now {rps:.1f} req/s · p95 {f'{p95:.2f} ms' if rps else '-'} · "
    errors = f"{err:.1f} err/s"
    return text + (f"[bold red]{errors}[/]" if err > 0 else errors)


class ModelPlots(Vertical):
    """One model: requests/s, latency percentiles, errors/s, batch size and queue time."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        super().__init__(classes="model-plots", **kwargs)
        self.model = model
        self._data: tuple[PlotData, Series | None] | None = None
        self._ready = False  # children composed (is_mounted turns True only after on_mount)

    def compose(self) -> ComposeResult:
        yield Label(f"[b]{self.model}[/b]", classes="plot-title")
        with Grid(classes="plot-grid"):
            yield TimePlot("requests", "req/s", classes="rps")
            yield TimePlot("latency", "ms", classes="latency")
            yield TimePlot("errors", "err/s", classes="errors")
            yield TimePlot("batch size", "rows", classes="batch")
            yield TimePlot("queue time p99", "ms", classes="queue")

    def on_mount(self) -> None:
        self._ready = True
        if self._data is not None:
            self.draw(*self._data)

    def draw(self, data: PlotData, latest: Series | None = None, *, plots: bool = True) -> None:
        """Redraw every plot of this model from ``data`` (``latest``: the newest live second,
        for the title line; ``plots=False``: the title line only); kept until mounted."""
        self._data = (data, latest)
        if not self._ready:
            return
        self.query_one(".plot-title", Label).update(headline(self.model, latest))
        if not plots:
            return
        s = data.model_series(self.model)
        r, newest, gap = data.range, data.newest, data.gap_s
        charts = list(self.query(TimePlot))
        charts[0].draw([("req/s", "cyan", s["rps"])], newest, r, gap)
        charts[1].draw([("p50", "green", s["p50"]), ("p95", "yellow", s["p95"]),
                       ("p99", "red", s["p99"])], newest, r, gap)
        charts[2].draw([("err/s", "red", s["errors"])], newest, r, gap)
        charts[3].draw([("batch", "magenta", s["batch"])], newest, r, gap)
        charts[4].draw([("queue p99", "blue", s["queue"])], newest, r, gap)


class DevicePlots(Vertical):
    """The device: CPU and memory in percent, temperature in °C."""

    def compose(self) -> ComposeResult:
        yield Label("device", classes="plot-title")
        with Grid(classes="plot-grid"):
            yield TimePlot("CPU", "%", classes="cpu")
            yield TimePlot("memory", "%", classes="mem")
            yield TimePlot("temperature", "°C", classes="temp")

    def draw(self, data: PlotData) -> None:
        """Redraw the device plots from ``data``."""
        s = data.device_series()
        plots = list(self.query(TimePlot))
        n, r, gap = data.newest, data.range, data.gap_s
        plots[0].draw([("CPU", "cyan", s["cpu"])], n, r, gap)
        plots[1].draw([("memory", "green", s["mem"])], n, r, gap)
        plots[2].draw([("temp", "red", s["temp"])], n, r, gap)
