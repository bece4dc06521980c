"""On-device tuning (the Model Analyzer role): a bounded grid of candidate settings, each
applied to the running agent as a live settings change (the hot-swap path, so the agent
serves throughout) and measured with :mod:`edge_agent.perf.load` at a few concurrency levels;
the best candidate is the highest throughput whose p99 stays within the latency budget.

No printing here: :mod:`edge_agent.perf.tune_cli` shows and stores what :func:`run_sweep`
returns.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from edge_agent.client.types import DeployResult, SettingInfo
from edge_agent.perf.load import Measurement

APPLY_COST_S = 4.0
"""What one candidate's switch (load, warm-up, probe, drain) is assumed to cost in the plan."""


class SettingsClient(Protocol):
    """The part of the management client a sweep uses."""

    def model_settings(self, model: str) -> list[SettingInfo]: ...

    def set_model_settings(self, model: str, values: Mapping[str, str] | None = None,
                           unset: Sequence[str] = (), *, replace: bool = False,
                           revert: bool = False) -> DeployResult: ...


Measure = Callable[[int], Measurement]
"""Measures the model as now configured at one concurrency level."""


@dataclass
class Point:
    """One measured concurrency level of one candidate."""

    concurrency: int
    throughput: float
    p50_us: float
    p99_us: float
    avg_us: float
    errors: int

    @classmethod
    def of(cls, m: Measurement) -> Point:
        return cls(m.concurrency, m.throughput, m.percentile_us(50), m.percentile_us(99),
                   m.avg_us, m.errors)


@dataclass
class Candidate:
    """Settings to try (key -> TOML literal, laid over the model's live settings)."""

    settings: dict[str, str]
    ok: bool = False
    error: str = ""
    points: list[Point] = field(default_factory=list)

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.settings.items())) or "as deployed"

    def best_point(self, budget_us: float | None) -> Point | None:
        """The highest-throughput error-free point within the budget (any p99 without one)."""
        fit = [p for p in self.points if p.errors == 0
               and (budget_us is None or p.p99_us <= budget_us)]
        return max(fit, key=lambda p: p.throughput, default=None)


@dataclass
class Sweep:
    """Every candidate of one tuning run and the one that won."""

    model: str
    budget_ms: float | None
    concurrency: list[int]
    baseline: dict[str, str]  # the model's live settings before the run
    candidates: list[Candidate]
    best: int | None = None
    applied: bool = False
    started_at: float = field(default_factory=time.time)

    def budget_us(self) -> float | None:
        return None if self.budget_ms is None else self.budget_ms * 1000

    def choose(self) -> int | None:
        """Index of the best candidate (highest throughput within the budget), or None."""
        scored = [(c.best_point(self.budget_us()), i) for i, c in enumerate(self.candidates)]
        fit = [(p.throughput, i) for p, i in scored if p is not None]
        self.best = max(fit)[1] if fit else None
        return self.best

    def summary(self) -> str:
        """One line: the best candidate and its gain over the first (the settings as they
        were), or why there is none."""
        budget = f"p99 <= {self.budget_ms:g} ms" if self.budget_ms is not None else "no budget"
        if self.best is None:
            return f"no candidate met {budget} ({len(self.candidates)} tried)"
        best = self.candidates[self.best]
        point = best.best_point(self.budget_us())
        assert point is not None
        line = (f"best ({budget}): {best.label()}: {point.throughput:.1f} infer/s at "
                f"concurrency {point.concurrency}, p99 {point.p99_us / 1000:.2f} ms")
        base = self.candidates[0].best_point(self.budget_us()) if self.candidates else None
        if base is not None and self.best != 0 and base.throughput > 0:
            line += f" (x{point.throughput / base.throughput:.2f} the settings before)"
        return line + (" — applied" if self.applied else "")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _literal(value: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return value


def candidate_grid(settings: Sequence[SettingInfo], *, backend: str = "",
                   cores: int | None = None) -> list[dict[str, str]]:
    """Candidates in the order to try: the settings as they are, one setting changed at a
    time, then pairs (instance count with queue delay, batch size or threads; OpenVINO hint
    with streams). Each is what differs from the current settings."""
    cores = cores or os.cpu_count() or 1
    now = {s.key: _literal(s.value) for s in settings if s.value}
    max_batch = int(now.get("max_batch_size") or 0)
    instances = sorted({1, 2, min(cores, 4)})
    delays = [0, 500, 2000]
    threads = sorted({1, cores})
    options: dict[str, list[Any]] = {"instances": instances, "max_queue_delay_us": delays,
                                     "threads": threads}
    if max_batch > 1:
        sizes = sorted({min(max_batch, 4), min(max_batch, 16), max_batch})
        options["max_batch_size"] = sizes
        options["preferred_batch_sizes"] = [[], [min(max_batch, 4)], [min(max_batch, 8)]]
    if backend == "openvino":
        options["openvino_hint"] = ["LATENCY", "THROUGHPUT"]
        options["openvino_streams"] = sorted({1, 2, min(cores, 4)})
    out: list[dict[str, str]] = [{}]

    def add(change: dict[str, Any]) -> None:
        diff = {k: _toml(v) for k, v in change.items() if now.get(k) != v}
        if diff and diff not in out:
            out.append(diff)

    for key, values in options.items():
        for value in values:
            add({key: value})
    for a, b in (("instances", "max_queue_delay_us"), ("instances", "max_batch_size"),
                 ("instances", "threads"), ("openvino_hint", "openvino_streams")):
        if a in options and b in options:
            for va, vb in itertools.product(options[a], options[b]):
                add({a: va, b: vb})
    return out


def _toml(value: Any) -> str:
    import json

    return json.dumps(value)


def plan_size(minutes: float, levels: int, seconds: float, warmup_s: float) -> int:
    """How many candidates fit in ``minutes`` (at least one)."""
    per = APPLY_COST_S + levels * (seconds + warmup_s)
    return max(1, math.floor(minutes * 60 / per))


def run_sweep(client: SettingsClient, model: str, candidates: Sequence[dict[str, str]],
              concurrency: Sequence[int], measure: Measure, *, budget_ms: float | None,
              on_candidate: Callable[[int, Candidate], None] | None = None) -> Sweep:
    """Apply each candidate (laid over the live settings the model had), measure it, then put
    the settings back as they were (one more settings change). Pick the best."""
    baseline = {s.key: s.value for s in client.model_settings(model) if s.source == "live"}
    sweep = Sweep(model, budget_ms, list(concurrency), baseline, [])
    try:
        for i, change in enumerate(candidates):
            cand = Candidate(dict(change))
            sweep.candidates.append(cand)
            if change:
                result = client.set_model_settings(model, {**baseline, **change},
                                                   replace=True)
                if not result.ok:
                    cand.error = result.message
                    if on_candidate is not None:
                        on_candidate(i, cand)
                    continue
            cand.ok = True
            cand.points = [Point.of(measure(c)) for c in concurrency]
            if on_candidate is not None:
                on_candidate(i, cand)
    finally:
        if any(c.settings for c in sweep.candidates):
            client.set_model_settings(model, baseline, replace=True)
    sweep.choose()
    return sweep


def apply_best(client: SettingsClient, sweep: Sweep) -> DeployResult | None:
    """Make the best candidate the model's settings (a recorded, revertible change)."""
    if sweep.best is None:
        return None
    best = sweep.candidates[sweep.best]
    if not best.settings:  # the settings as they were won: they are the model's already
        sweep.applied = True
        return None
    result = client.set_model_settings(sweep.model, {**sweep.baseline, **best.settings},
                                       replace=True)
    sweep.applied = result.ok
    return result
