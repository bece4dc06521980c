"""Model orchestration figures, as ratios measured in one run on this machine.

    PYTHONPATH=. python -m benchmarks.bench_orchestration             # ~2-3 minutes
    PYTHONPATH=. python -m benchmarks.bench_orchestration --rounds 5

1. Cold start per model kind: the first request on an unloaded ``load = "on-demand"`` model
   (it loads, warms up, then answers) against a request on the loaded model, through the data
   plane the gRPC edge calls: the light squeezenet on ONNX Runtime in the agent's process, the
   same CNN on OpenVINO in a runtime process, and the Python model of examples/pipeline
   (post.py, in a runtime process). The model is unloaded between rounds the way the idle
   unload does it.
2. A memory budget that holds one of three CNNs (squeezenet, shufflenet, inception_v1 in
   runtime processes, one instance each; the budget is 1.15x the largest figure measured
   here), requests cycling through the three: every request is a cold first request. Reported:
   the added latency of a cold request over a warm one, the budget's accounting (figures of the
   loaded versions) and the peak RSS of this process and its runtime processes, sampled at
   50 Hz, both against the budget.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.orchestrator import process_rss
from edge_agent.core.types import InferRequest
from packager.build import build_bundles
from packager.bundle.reader import open_bundle
from tests.support.model_factory import LIGHT_BUILD, light_model_path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def _install(bundle: Path, state: Path) -> None:
    with open_bundle(bundle) as reader:
        m = reader.manifest
        reader.extract(state / "models" / m.name / str(m.version))


def _cnn_request(model: str) -> InferRequest:
    name = "gpu_0/data_0" if model.startswith("shufflenet") else "data_0"
    return InferRequest(model, {name: np.zeros((1, 3, 224, 224), np.float32)})


def _post_request(model: str) -> InferRequest:
    probs = np.random.default_rng(0).random((1, 10)).astype(np.float32)
    return InferRequest(model, {"PROBS": probs})


def _timed(dp: DataPlane, request: InferRequest) -> float:
    t0 = time.perf_counter()
    dp.infer(request, timeout_s=600)
    return (time.perf_counter() - t0) * 1e3


def _unload_all(dp: DataPlane) -> None:
    """What the idle unload does, now (every loaded version counts as idle)."""
    dp.orchestrator.sweep(now=time.monotonic() + 1e9)


def cold_start(work: Path, rounds: int) -> None:
    out = work / "out"
    kinds: list[tuple[str, str, Path, Callable[[str], InferRequest], str]] = []
    (ort_b,) = build_bundles(light_model_path("squeezenet"), name="sq_ort", version=1,
                             profiles=["x86_64-cpu-onnxruntime"], out_dir=out,
                             dynamic_batch=True, **LIGHT_BUILD)
    (ov_b,) = build_bundles(light_model_path("squeezenet"), name="sq_ov", version=1,
                            profiles=["x86_64-cpu-openvino"], out_dir=out, dynamic_batch=True,
                            **LIGHT_BUILD)
    (py_b,) = build_bundles(ROOT / "examples" / "pipeline" / "post.toml", name="post",
                            version=1, profiles=["x86_64-cpu-onnxruntime"], out_dir=out)
    kinds = [("ONNX Runtime, in the agent's process", "sq_ort", ort_b, _cnn_request, "thread"),
             ("OpenVINO, in a runtime process", "sq_ov", ov_b, _cnn_request, "process"),
             ("Python model (post.py), in a runtime process", "post", py_b, _post_request,
              "auto")]
    state = work / "cold"
    for _label, _name, bundle, _req, _iso in kinds:
        _install(bundle, state)
    overrides = {name: ModelOverrides(load="on-demand", isolation=iso, instances=1,
                                      idle_unload_s=3600.0)
                 for _l, name, _b, _r, iso in kinds}
    dp = DataPlane(state, overrides=overrides)
    try:
        for label, name, _bundle, make, _iso in kinds:
            request = make(name)
            cold, warm = [], []
            for _ in range(rounds):
                _unload_all(dp)
                cold.append(_timed(dp, request))
                warm.extend(_timed(dp, request) for _ in range(20))
            c, w = statistics.median(cold), statistics.median(warm)
            print(f"  {label}: cold first request {c:.0f} ms (median of {rounds}), warm "
                  f"{w:.2f} ms: x{c / w:.0f}")
    finally:
        dp.close()


class _PeakRss:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, process_rss())

    def __enter__(self) -> _PeakRss:
        self.peak = process_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def budget_cycle(work: Path, rounds: int) -> None:
    names = ("squeezenet", "shufflenet", "inception_v1")
    state = work / "budget"
    for name in names:
        (bundle,) = build_bundles(light_model_path(name), name=name, version=1,
                                  profiles=["x86_64-cpu-onnxruntime"], out_dir=work / "out",
                                  dynamic_batch=True, **LIGHT_BUILD)
        _install(bundle, state)
    overrides = {n: ModelOverrides(isolation="process", instances=1) for n in names}
    probe = DataPlane(state, overrides=overrides)  # figures measured here, no budget
    try:
        figures = {n: probe.orchestrator.memory_of(n, 1)[0] for n in names}
    finally:
        probe.close()
    budget = int(max(figures.values()) * 1.15)
    print("  figures measured: " + ", ".join(f"{n} {b / MIB:.0f} MiB"
                                             for n, b in figures.items())
          + f"; budget {budget / MIB:.0f} MiB")
    dp = DataPlane(state, overrides=overrides, memory_budget_bytes=budget)
    try:
        warm = [_timed(dp, _cnn_request(names[-1])) for _ in range(20)]  # the loaded one
        cold: list[float] = []
        used_peak = 0
        with _PeakRss() as rss:
            base = rss.peak
            for _ in range(rounds):
                for name in names:
                    cold.append(_timed(dp, _cnn_request(name)))
                    used_peak = max(used_peak, dp.orchestrator.used_bytes())
        c, w = statistics.median(cold), statistics.median(warm)
        print(f"  {len(cold)} requests cycling through 3 CNNs, all answered: cold request "
              f"{c:.0f} ms (median), warm {w:.1f} ms: +{c - w:.0f} ms per cold request")
        print(f"  budget accounting peak {used_peak / MIB:.0f} MiB of {budget / MIB:.0f} MiB "
              f"({used_peak / budget:.0%}); RSS (this process + runtime processes) peak "
              f"{rss.peak / MIB:.0f} MiB, {(rss.peak - base) / MIB:+.0f} MiB over the start "
              f"of the cycle")
    finally:
        dp.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="cold requests per kind / cycles")
    args = ap.parse_args(argv)
    print(f"load average {' '.join(f'{x:.1f}' for x in psutil.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print("cold start per model kind:")
        cold_start(work, args.rounds)
        print("memory budget holding one of three CNNs:")
        budget_cycle(work, args.rounds)
    print(f"load average {' '.join(f'{x:.1f}' for x in psutil.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
