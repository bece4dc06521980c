"""Serving-core overhead: direct backend calls vs the data plane, in one run, in process.

For the MLP (random weights) and squeezenet, on every backend installed here:

* direct c1   - one thread calling ``backend.infer`` with one row at a time
* plane c1    - one thread through the data plane, ``submit(...).result()`` and ``infer(...)``
* direct c16  - 16 threads calling ``backend.infer`` (one row each) over the instance pool
* plane c16   - 16 threads through ``submit(...).result()`` (dynamic batching)
* best direct - the best rows/s of direct batched calls (batch 1..max_batch), the ceiling

Phases are interleaved over several rounds so that load from other processes hits them alike.
It prints throughput, p50/p99 latency, process CPU per call (comparable on a busy machine), the
ratios, and a cProfile of the single-caller path.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_core.py [--seconds 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import queue
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_agent.backends import BackendOptions, available_backends, load_backend
from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.repository import load_manifest
from edge_agent.core.types import InferRequest
from packager.build import build_bundles
from packager.bundle.reader import open_bundle
from tests.support.model_factory import LIGHT_BUILD, light_model_path, make_mlp


@dataclass
class Run:
    rows_per_s: float
    p50_us: float
    p99_us: float
    cpu_us_per_call: float = 0.0


def _summarize(latencies: list[int], rows: int, wall_s: float) -> Run:
    lat = np.array(latencies, dtype=np.float64) / 1e3
    return Run(rows / wall_s, float(np.percentile(lat, 50)), float(np.percentile(lat, 99)))


def _direct_pool(backend, instances: int, feed):
    pool: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(instances):
        pool.put(i)

    def call() -> None:
        i = pool.get()
        try:
            backend.infer(feed, i)
        finally:
            pool.put(i)
    return call


def _fmt(r: Run) -> str:
    return (f"{r.rows_per_s:9.0f} rows/s  p50 {r.p50_us:8.0f} us  p99 {r.p99_us:8.0f} us  "
            f"cpu {r.cpu_us_per_call:7.0f} us/call")


class Phase:
    """Latencies and rows of one phase, accumulated over interleaved rounds."""

    def __init__(self) -> None:
        self.lat: list[int] = []
        self.rows = 0
        self.wall = 0.0
        self.cpu = 0.0

    def run(self, call, threads: int, seconds: float, rows: int = 1) -> None:
        lats: list[list[int]] = [[] for _ in range(threads)]
        stop = time.monotonic() + seconds
        barrier = threading.Barrier(threads + 1)

        def loop(i: int) -> None:
            out = lats[i]
            now = time.monotonic_ns
            barrier.wait()
            while time.monotonic() < stop:
                t = now()
                call()
                out.append(now() - t)

        ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        barrier.wait()
        t0, c0 = time.monotonic(), time.process_time()
        for t in ts:
            t.join()
        self.wall += time.monotonic() - t0
        self.cpu += time.process_time() - c0
        for xs in lats:
            self.lat.extend(xs)
            self.rows += len(xs) * rows

    def result(self) -> Run:
        run = _summarize(self.lat, self.rows, self.wall)
        run.cpu_us_per_call = self.cpu * 1e6 / max(1, len(self.lat))
        return run


def bench_model(label: str, state: Path, name: str, feed_name: str, shape: tuple[int, ...],
                backend_name: str, seconds: float, rounds: int, instances: int,
                threads: int) -> dict:
    """Phases interleaved over ``rounds`` so that load from elsewhere hits them alike."""
    model_dir = state / "models" / name / "1"
    manifest = load_manifest(model_dir)
    x1 = np.random.default_rng(0).standard_normal((1, *shape)).astype(np.float32)
    feed = {feed_name: x1}
    sizes = [b for b in (1, 4, 8, 16, 32) if b <= manifest.batching.max_batch_size]
    phases = {k: Phase() for k in ("direct c1", "plane c1 (submit)", "plane c1 (infer)",
                                   "direct c16", "plane c16 (submit)")}
    sweep = {b: Phase() for b in sizes}
    backend = load_backend(model_dir, manifest,
                           BackendOptions(instances=instances, threads=threads),
                           preferred=backend_name)
    overrides = ModelOverrides(backend=backend_name, instances=instances, threads=threads)
    dp = DataPlane(state, overrides={name: overrides})
    try:
        req = InferRequest(name, feed)
        submit, infer = dp.submit, dp.infer
        pool = _direct_pool(backend, instances, feed)
        batched = {b: _direct_pool(backend, instances, {feed_name: np.repeat(x1, b, axis=0)})
                   for b in sizes}
        for _ in range(20):
            backend.infer(feed, 0)
            infer(req)
        for _ in range(rounds):
            phases["direct c1"].run(lambda: backend.infer(feed, 0), 1, seconds)
            phases["plane c1 (submit)"].run(lambda: submit(req).result(), 1, seconds)
            phases["plane c1 (infer)"].run(lambda: infer(req), 1, seconds)
            phases["direct c16"].run(pool, 16, seconds)
            phases["plane c16 (submit)"].run(lambda: submit(req).result(), 16, seconds)
            for b in sizes:
                sweep[b].run(batched[b], instances, seconds / 3, rows=b)
        stats = dp.statistics(name)[0]
    finally:
        dp.close()
        backend.close()
    results = {k: p.result() for k, p in phases.items()}
    best_b = max(sizes, key=lambda b: sweep[b].result().rows_per_s)
    results[f"best direct (batch {best_b})"] = sweep[best_b].result()
    print(f"\n== {label} on {backend_name} (instances {instances}, threads {threads or 'auto'}, "
          f"{rounds} interleaved rounds of {seconds:g} s per phase)")
    for key, r in results.items():
        print(f"  {key:24s} {_fmt(r)}")
    thr = {k: r.rows_per_s for k, r in results.items()}
    best = thr[f"best direct (batch {best_b})"]
    ratios = {
        "plane/direct c1 p50 (submit)": results["plane c1 (submit)"].p50_us
        / results["direct c1"].p50_us,
        "plane/direct c1 p50 (infer)": results["plane c1 (infer)"].p50_us
        / results["direct c1"].p50_us,
        "plane/direct c16 thr": thr["plane c16 (submit)"] / thr["direct c16"],
        "plane c16/best direct thr": thr["plane c16 (submit)"] / best,
        "plane/direct c1 cpu (infer)": results["plane c1 (infer)"].cpu_us_per_call
        / results["direct c1"].cpu_us_per_call,
        "plane/direct c16 cpu per row": results["plane c16 (submit)"].cpu_us_per_call
        / results["direct c16"].cpu_us_per_call,
    }
    for k, v in ratios.items():
        print(f"  {k:30s} {v:5.2f}")
    mean_batch = stats.inference_count / max(1, stats.execution_count)
    print(f"  mean rows per execution {mean_batch:.1f}; executions by batch size: "
          + ", ".join(f"{s}x{bs.compute_infer.count}"
                      for s, bs in sorted(stats.batch_stats.items())[:16]))
    return ratios


def profile_single_caller(state: Path, name: str, feed_name: str, shape: tuple[int, ...],
                          backend_name: str, n: int) -> None:
    dp = DataPlane(state, overrides={name: ModelOverrides(backend=backend_name, instances=1)})
    try:
        req = InferRequest(name, {feed_name: np.zeros((1, *shape), np.float32)})
        for _ in range(200):
            dp.submit(req).result()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            dp.submit(req).result()
        prof.disable()
    finally:
        dp.close()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
    print(f"\n== cProfile: {n} single-caller requests of {name} on {backend_name} (tottime)")
    print("\n".join(line for line in out.getvalue().splitlines()[4:] if line.strip()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="duration of each phase in each round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per model")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile section")
    args = ap.parse_args()
    backends = [b for b in ("onnxruntime", "openvino") if b in available_backends()]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        state = d / "state"
        mlp = make_mlp(d / "mlp.onnx")
        bundles = build_bundles(mlp, name="mlp", version=1, profiles=["x86_64-cpu-openvino"],
                                out_dir=d / "out", dynamic_batch=True, max_batch=32)
        bundles += build_bundles(light_model_path("squeezenet"), name="squeezenet", version=1,
                                 profiles=["x86_64-cpu-openvino"], out_dir=d / "out",
                                 dynamic_batch=True, max_batch=16, **LIGHT_BUILD)
        for b in bundles:
            with open_bundle(b) as r:
                r.extract(state / "models" / r.manifest.name / "1")
        for backend in backends:
            bench_model("MLP 64-128-10", state, "mlp", "input", (64,), backend, args.seconds,
                        args.rounds, instances=1, threads=1)
            bench_model("squeezenet", state, "squeezenet", "data_0", (3, 224, 224), backend,
                        args.seconds * 2, args.rounds,
                        instances=2 if backend == "openvino" else 1, threads=0)
        if not args.no_profile:
            profile_single_caller(state, "mlp", "input", (64,), backends[0], 3000)


if __name__ == "__main__":
    main()
