"""The memory-budget scenario of issue 28, shared by its test and ``benchmarks/bench_budget``:
three copies of a padded light CNN, ``load = "on-demand"``, a budget of 1.5 models (the
memory figure edge-pack build measured), callers cycling through the three; the peak resident
memory of this process and its runtime processes above the empty agent, sampled at 100 Hz,
and every failed request."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.orchestrator import process_rss
from edge_agent.core.types import InferRequest
from packager.build import build_bundles
from packager.bundle.reader import open_bundle
from tests.support.model_factory import LIGHT_BUILD, padded_light_model

MIB = 1 << 20
COPIES = ("d1", "d2", "d3")


@dataclass
class Outcome:
    """What one run did: requests, failures (message: count), peak RSS above empty, the
    budget and the peak of the agent's own accounting."""

    requests: int
    failures: Counter[str] = field(default_factory=Counter)
    peak_above_empty: int = 0
    budget: int = 0
    accounted_peak: int = 0

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def install_copies(work: Path, pad_mib: float) -> tuple[Path, int]:
    """Build the three copies (once per ``work``) into ``work/state``; (state dir, one
    model's memory figure as ``edge-pack build`` measured it: the manifest's load cost)."""
    state = work / "state"
    source = padded_light_model("squeezenet", work / "onnx", pad_mib)
    for name in COPIES:
        if (state / "models" / name / "1").is_dir():
            continue
        (bundle,) = build_bundles(source, name=name, version=1,
                                  profiles=["x86_64-cpu-onnxruntime"], out_dir=work / "out",
                                  dynamic_batch=True, **LIGHT_BUILD)
        with open_bundle(bundle) as reader:
            reader.extract(state / "models" / name / "1")
        bundle.unlink()
    from packager.bundle.reader import load_extracted

    manifest = load_extracted(state / "models" / COPIES[0] / "1", verify_hashes=False)
    return state, manifest.load_cost_bytes


class _Peak:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, process_rss())

    def __enter__(self) -> _Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def run(state: Path, model_bytes: int, callers: int, rounds: int, *,
        isolation: str = "auto", load_timeout_ms: int = 600_000) -> Outcome:
    """``callers`` threads, each sending ``rounds`` passes over the three copies (caller i
    starts at copy i), against a budget of 1.5 models."""
    budget = int(model_bytes * 1.5)
    on_demand = ModelOverrides(load="on-demand", isolation=isolation, instances=1,
                               load_timeout_ms=load_timeout_ms)
    dp = DataPlane(state, overrides=dict.fromkeys(COPIES, on_demand),
                   memory_budget_bytes=budget)
    outcome = Outcome(requests=callers * rounds * len(COPIES), budget=budget)
    lock = threading.Lock()
    x = np.zeros((1, 3, 224, 224), np.float32)
    start = threading.Barrier(callers + 1)

    def caller(i: int) -> None:
        start.wait(60)
        for r in range(rounds * len(COPIES)):
            name = COPIES[(i + r) % len(COPIES)]
            try:
                dp.infer(InferRequest(name, {"data_0": x}), timeout_s=600)
            except Exception as exc:  # counted: the figure this scenario reports
                with lock:
                    outcome.failures[f"{type(exc).__name__}: {exc}"] += 1
            with lock:
                outcome.accounted_peak = max(outcome.accounted_peak,
                                             dp.orchestrator.used_bytes())

    try:
        empty = process_rss()
        threads = [threading.Thread(target=caller, args=(i,), name=f"caller-{i}")
                   for i in range(callers)]
        with _Peak() as peak:
            for t in threads:
                t.start()
            start.wait(60)
            for t in threads:
                t.join(1800)
        outcome.peak_above_empty = max(0, peak.peak - empty)
    finally:
        with contextlib.suppress(Exception):
            dp.close()
    return outcome
