"""Protocol-free view models of one agent: its state snapshot and a window of live metrics.

The values come from the management client (plain dataclasses, never protobuf); the agent
screen renders them. :class:`LiveMetrics` keeps a bounded window per model so a long session
never grows memory, and collapses a burst of samples into the latest per second.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from edge_agent.client.types import (
    AgentInfo,
    DeploymentInfo,
    MetricsSample,
    TuningInfo,
    VersionInfo,
)
from edge_agent.rollback_rule import rollback_target

WINDOW = 120  # seconds of live metrics kept per model


@dataclass(frozen=True)
class AgentSnapshot:
    """What one poll of an agent returned (``error``: why it could not be asked)."""

    info: AgentInfo | None = None
    versions: tuple[VersionInfo, ...] = ()
    deployments: tuple[DeploymentInfo, ...] = ()
    error: str = ""
    fetched_at: float | None = None  # when the data above was last fresh (wall clock)
    tuning: tuple[TuningInfo, ...] = ()  # the last tuning run of each model

    def tuning_lines(self) -> list[str]:
        """One line per model tuned on this agent: its last run's summary."""
        return [f"last tuning of {t.model}: {t.summary}" for t in self.tuning]

    def stale_for(self, now: float) -> float | None:
        """Seconds since the data was fresh when the last poll failed, else None (live)."""
        if not self.error or self.fetched_at is None:
            return None
        return max(0.0, now - self.fetched_at)

    def models(self) -> list[str]:
        """Model names on the agent, sorted."""
        return sorted({v.model for v in self.versions})

    def active_version(self, model: str) -> int | None:
        """The active version of ``model``, if any."""
        return next((v.version for v in self.versions if v.model == model and v.active), None)

    def rollback_target(self, model: str) -> int | None:
        """The version a rollback of ``model`` goes to by default: the agent's rule
        (:mod:`edge_agent.rollback_rule`), else the newest version on disk when none is active."""
        active = self.active_version(model)
        usable = {v.version for v in self.versions
                  if v.model == model and v.stored_state != "failed"}
        if active is None:
            return max(usable) if usable else None
        return rollback_target(active, usable,
                               [d for d in self.deployments if d.model == model])[0]


@dataclass
class Series:
    """One model's live throughput and latency, newest last."""

    ts: deque[int] = field(default_factory=lambda: deque(maxlen=WINDOW))
    rps: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    p95_ms: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    errors: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))


class LiveMetrics:
    """Live samples folded per model (all versions summed)."""

    def __init__(self) -> None:
        self.series: dict[str, Series] = {}
        self.system: dict[str, float] | None = None
        self.last_ts = 0

    def add(self, sample: MetricsSample) -> None:
        """Fold one WatchMetrics sample in (a sample for a second already seen replaces it).

        A model seen before that has no point in this sample had no requests in that second:
        it gets zeros, so a plot falls to zero when traffic stops instead of freezing."""
        per_model: dict[str, tuple[float, float, float]] = {}
        for p in sample.points:
            rps, p95, err = per_model.get(p.model, (0.0, 0.0, 0.0))
            per_model[p.model] = (rps + p.requests_per_s, max(p95, p.p95_ms or 0.0),
                                  err + p.errors)
        for model in self.series.keys() - per_model.keys():
            per_model[model] = (0.0, 0.0, 0.0)  # an idle second is a zero, not a gap
        for model, (rps, p95, err) in per_model.items():
            s = self.series.setdefault(model, Series())
            if s.ts and s.ts[-1] == sample.ts:
                s.ts.pop(), s.rps.pop(), s.p95_ms.pop(), s.errors.pop()
            s.ts.append(sample.ts)
            s.rps.append(rps)
            s.p95_ms.append(p95)
            s.errors.append(err)
        if sample.system is not None:
            self.system = dict(sample.system)
        self.last_ts = max(self.last_ts, sample.ts)

    def models(self) -> list[str]:
        """Models with samples, sorted."""
        return sorted(self.series)

    def summary_line(self) -> str:
        """The newest second of every model on one line (the plots of a compact screen)."""
        parts = []
        for model in self.models():
            s = self.series[model]
            if not s.ts:
                continue
            p95 = f"{s.p95_ms[-1]:.1f} ms" if s.rps[-1] else "-"
            parts.append(f"{model} {s.rps[-1]:.0f} req/s p95 {p95} err {s.errors[-1]:.0f}/s")
        return "live: " + (" · ".join(parts) if parts else "no requests since this opened")


def cache_cell(v: VersionInfo) -> str:
    """A version's response cache: ``-`` when off, else hits and hit rate since it loaded."""
    if not v.response_cache:
        return "-"
    rate = v.cache_hit_rate
    return f"{v.cache_hits} hits ({rate:.0%})" if rate is not None else "on (no lookups)"


def format_bytes(n: float | None) -> str:
    """``1.5 MiB`` style."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def system_line(system: dict[str, float] | None) -> str:
    """One line of system load (CPU, memory, agent RSS, disk, temperature)."""
    if not system:
        return "system: waiting for the first sample"
    parts = [f"CPU {system.get('cpu_percent', 0):.0f}%",
             f"mem {system.get('mem_percent', 0):.0f}%",
             f"agent RSS {format_bytes(system.get('rss_bytes'))}",
             f"disk free {format_bytes(system.get('disk_free_bytes'))}"]
    if "temp_c" in system:
        parts.append(f"{system['temp_c']:.0f}°C")
    return "system: " + " · ".join(parts)


def step_lines(deployments: Sequence[DeploymentInfo]) -> list[tuple[float, str, bool]]:
    """Every recorded deployment step as (time, text, ok), newest first."""
    out = []
    for d in deployments:
        target = f"{d.model} {d.kind} v{d.from_version or '-'}→v{d.to_version or '-'}"
        for s in d.steps:
            out.append((s.at or d.started_at, f"{target}: {s.step} {s.message}", s.ok))
    return sorted(out, key=lambda x: x[0], reverse=True)
