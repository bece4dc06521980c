"""Protocol-free data behind the console's plots: per-model metrics and device load in time
buckets of one range (5 min, 1 h, 24 h).

A range's buckets start from the agent's stored history (QueryMetrics and QuerySystemMetrics
rolled up to the range's step) and then grow from live WatchMetrics seconds folded into the same
buckets. Everything is keyed by the samples' own timestamps (never the console's clock), so a
plot of given data is always drawn the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from edge_agent.client.types import MetricPoint, MetricsSample, SystemPoint


@dataclass(frozen=True)
class PlotRange:
    """A time range of the plots: ``span_s`` back from the newest data, in ``step_s`` buckets."""

    label: str
    span_s: int
    step_s: int
    tick_format: str  # strftime of the time axis labels (UTC)


RANGES: tuple[PlotRange, ...] = (
    PlotRange("5 min", 300, 2, "%H:%M:%S"),
    PlotRange("1 h", 3600, 15, "%H:%M"),
    PlotRange("24 h", 86400, 300, "%H:%M"),
)


@dataclass
class ModelBucket:
    """One model over one step: request and error counts, latency and batch figures."""

    seconds: int = 0  # live seconds folded in (0: the bucket came from the stored history)
    step_s: int = 1
    requests: float = 0.0
    errors: float = 0.0
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    batch: float | None = None
    queue_ms: float | None = None

    @property
    def requests_per_s(self) -> float:
        """Requests a second over the time this bucket covers so far."""
        return self.requests / max(self.seconds or self.step_s, 1)

    @property
    def errors_per_s(self) -> float:
        """Errors a second over the time this bucket covers so far."""
        return self.errors / max(self.seconds or self.step_s, 1)


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


@dataclass
class DeviceBucket:
    """Device load over one step (means of the live seconds in it)."""

    seconds: int = 0
    step_s: int = 1  # the widest stored point folded in (history rolled up to minutes: 60)
    cpu_percent: float = 0.0
    mem_percent: float = 0.0
    temp_c: float | None = None

    def add(self, system: dict[str, float]) -> None:
        """Fold one second's system sample in (running means)."""
        n = self.seconds
        self.cpu_percent = (self.cpu_percent * n + system.get("cpu_percent", 0.0)) / (n + 1)
        self.mem_percent = (self.mem_percent * n + system.get("mem_percent", 0.0)) / (n + 1)
        if "temp_c" in system:
            t = system["temp_c"]
            self.temp_c = t if self.temp_c is None else (self.temp_c * n + t) / (n + 1)
        self.seconds = n + 1


@dataclass
class PlotData:
    """Every model's buckets and the device's for one range; history first, then live."""

    range: PlotRange = RANGES[0]
    models: dict[str, dict[int, ModelBucket]] = field(default_factory=dict)
    device: dict[int, DeviceBucket] = field(default_factory=dict)
    history_until: float = 0.0  # live seconds before this are already in the history
    history_loaded: bool = False  # live seconds wait for the history (no second counted twice)
    newest: int = 0
    _pending: list[MetricsSample] = field(default_factory=list)

    def reset(self, plot_range: PlotRange) -> None:
        """Start over with another range (its history is asked for again)."""
        self.range = plot_range
        self.models.clear()
        self.device.clear()
        self.history_until = 0.0
        self.history_loaded = False
        self.newest = 0

    @property
    def gap_s(self) -> int:
        """The widest step between two neighbouring points that is not a gap."""
        widths = [b.step_s for m in self.models.values() for b in m.values()]
        widths += [d.step_s for d in self.device.values()]
        return max([self.range.step_s, *widths])

    def _bucket(self, ts: int) -> int:
        return ts - ts % self.range.step_s

    def add_history(self, points: dict[str, list[MetricPoint]], until: float,
                    system: Sequence[SystemPoint] = ()) -> None:
        """Stored points per model (all versions) and of the device, queried up to ``until``;
        live seconds that came before are folded in after them (those the history already
        holds are skipped)."""
        for sp in system:
            d = self.device.setdefault(self._bucket(sp.ts), DeviceBucket())
            n, w = d.seconds, max(sp.step_s, 1)  # a stored point weighs its step's seconds
            d.cpu_percent = (d.cpu_percent * n + sp.cpu_percent * w) / (n + w)
            d.mem_percent = (d.mem_percent * n + sp.mem_percent * w) / (n + w)
            if sp.temp_c is not None:
                d.temp_c = sp.temp_c if d.temp_c is None else (d.temp_c * n + sp.temp_c * w) / (
                    n + w)
            d.seconds = n + w
            d.step_s = max(d.step_s, w)
            self.newest = max(self.newest, sp.ts)
        for model, model_points in points.items():
            buckets = self.models.setdefault(model, {})
            for p in model_points:
                key = self._bucket(p.ts)
                b = buckets.setdefault(key, ModelBucket(step_s=self.range.step_s))
                b.step_s = max(b.step_s, p.step_s)  # a minute rollup covers a whole minute
                b.requests += p.requests
                b.errors += p.errors
                b.p50_ms, b.p95_ms = _max(b.p50_ms, p.p50_ms), _max(b.p95_ms, p.p95_ms)
                b.p99_ms = _max(b.p99_ms, p.p99_ms)
                b.queue_ms = _max(b.queue_ms, p.queue_p99_ms)
                b.batch = _max(b.batch, p.mean_batch)
                self.newest = max(self.newest, p.ts)
        self.history_until = until
        self.history_loaded = True
        pending, self._pending = self._pending, []
        for sample in pending:
            self.add_sample(sample)
        self._prune()

    def add_sample(self, sample: MetricsSample) -> None:
        """Fold one live second in (seconds the history already holds are skipped); a model
        seen before without a point in this second had no requests: it gets a zero second."""
        if not self.history_loaded:
            self._pending.append(sample)  # folded in once the history is here
            del self._pending[:-self.range.span_s]
            return
        if sample.ts < int(self.history_until):
            return
        key = self._bucket(sample.ts)
        seen: set[str] = set()
        for p in sample.points:
            b = self.models.setdefault(p.model, {}).setdefault(
                key, ModelBucket(step_s=self.range.step_s))
            if p.model not in seen:
                b.seconds += 1
                seen.add(p.model)
            b.requests += p.requests_per_s
            b.errors += p.errors
            b.p50_ms, b.p95_ms = _max(b.p50_ms, p.p50_ms), _max(b.p95_ms, p.p95_ms)
            b.p99_ms, b.queue_ms = _max(b.p99_ms, p.p99_ms), _max(b.queue_ms, p.queue_p99_ms)
            b.batch = _max(b.batch, p.mean_batch)
        for model in self.models.keys() - seen:
            self.models[model].setdefault(key, ModelBucket(step_s=self.range.step_s)).seconds += 1
        if sample.system is not None:
            self.device.setdefault(key, DeviceBucket()).add(sample.system)
        self.newest = max(self.newest, sample.ts)
        self._prune()

    def _prune(self) -> None:
        oldest = self.newest - self.range.span_s
        for buckets in self.models.values():
            for key in [k for k in buckets if k < oldest]:
                del buckets[key]
        for key in [k for k in self.device if k < oldest]:
            del self.device[key]

    def model_names(self) -> list[str]:
        """Models with data, sorted."""
        return sorted(m for m, b in self.models.items() if b)

    def model_series(self, model: str) -> dict[str, list[tuple[int, float]]]:
        """``model``'s plot lines as (bucket time, value), oldest first. A step with no stored
        or live bucket had no requests: requests/s and errors/s are zero there (the agent stores
        no empty buckets), never a line drawn across the gap; latency, batch and queue only where
        there were requests (a gap in them is a gap: see :func:`segments`)."""
        out: dict[str, list[tuple[int, float]]] = {
            k: [] for k in ("rps", "errors", "p50", "p95", "p99", "batch", "queue")}
        buckets = self.models.get(model, {})
        if not buckets:
            return out
        step = self.range.step_s
        first = min(buckets)
        last = max(max(buckets), self._bucket(self.newest))
        covered = first  # a stored minute in shorter steps covers the steps after it too
        for ts in range(first, last + 1, step):
            b = buckets.get(ts)
            if b is None and ts < covered:
                continue
            covered = ts + (b.step_s if b else step)
            out["rps"].append((ts, b.requests_per_s if b else 0.0))
            out["errors"].append((ts, b.errors_per_s if b else 0.0))
            if b is None or not b.requests:
                continue
            for name, value in (("p50", b.p50_ms), ("p95", b.p95_ms), ("p99", b.p99_ms),
                                ("batch", b.batch), ("queue", b.queue_ms)):
                if value is not None:
                    out[name].append((ts, value))
        return out

    def device_series(self) -> dict[str, list[tuple[int, float]]]:
        """The device's CPU %, memory % and temperature as (bucket time, value), oldest first."""
        out: dict[str, list[tuple[int, float]]] = {"cpu": [], "mem": [], "temp": []}
        for ts, b in sorted(self.device.items()):
            out["cpu"].append((ts, b.cpu_percent))
            out["mem"].append((ts, b.mem_percent))
            if b.temp_c is not None:
                out["temp"].append((ts, b.temp_c))
        return out


def segments(points: Sequence[tuple[int, float]], step_s: int
             ) -> list[list[tuple[int, float]]]:
    """``points`` cut where a step is missing: each run is drawn on its own, so a gap stays a
    gap and no line is interpolated across it."""
    runs: list[list[tuple[int, float]]] = []
    for ts, value in points:
        if runs and ts - runs[-1][-1][0] <= step_s:
            runs[-1].append((ts, value))
        else:
            runs.append([(ts, value)])
    return runs


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Iterable[float], width: int = 12) -> str:
    """The last ``width`` values as block characters scaled to their maximum ('' when none)."""
    vals = list(values)[-width:]
    if not vals:
        return ""
    top = max(vals)
    if top <= 0:
        return SPARK[0] * len(vals)
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))]
                   for v in vals)
