"""Cost of metrics: hot-path ns per call, batcher throughput on vs off, flush cost, DB size.

Run: .venv/bin/python benchmarks/bench_metrics.py [--seconds 86400] [--models 10]
All figures come from this one run; compare the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_agent.core.observer import NullObserver
from edge_agent.metrics import MetricsRecorder, MetricsStore, SecondRow, SystemSampler
from edge_agent.metrics import histogram as hist


def ns_per_call(observer: object, n: int) -> float:
    rec = observer.record_request  # type: ignore[attr-defined]
    lat = [random.randint(50_000, 5_000_000) for _ in range(1024)]
    t0 = time.perf_counter_ns()
    for i in range(n):
        x = lat[i & 1023]
        rec("model-a", 1, ok=True, rows=1, queue_ns=x >> 2, compute_ns=x >> 1, total_ns=x)
    return (time.perf_counter_ns() - t0) / n


def bench_hot_path(n: int = 200_000, rounds: int = 5) -> None:
    null, real = NullObserver(), MetricsRecorder(None)
    nulls, reals = [], []
    for _ in range(rounds):  # alternate so drift in machine load hits both
        nulls.append(ns_per_call(null, n))
        reals.append(ns_per_call(real, n))
    b_null, b_real = min(nulls), min(reals)
    print(f"record_request: NullObserver {b_null:.0f} ns/call, MetricsRecorder {b_real:.0f} "
          f"ns/call (+{b_real - b_null:.0f} ns; best of {rounds} x {n})")


class _DoubleBackend:
    """A minimal in-process backend (y = 2x) so the batcher's own cost dominates."""

    name, device = "bench", "cpu"

    def __init__(self) -> None:
        from packager.bundle.manifest import TensorSpec
        self.inputs = (TensorSpec("x", "FP32", (-1, 16)),)
        self.outputs = (TensorSpec("y", "FP32", (-1, 16)),)

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        return {"y": inputs["x"] * 2.0}

    def close(self) -> None:
        return None


class _MlpBackend(_DoubleBackend):
    """A small real model: the repo's random-weight MLP (64-128-10) on ONNX Runtime, 1 thread."""

    def __init__(self, tmp: Path) -> None:
        import onnxruntime as ort

        from packager.bundle.manifest import TensorSpec
        from packager.samples import make_mlp
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(make_mlp(tmp / "mlp.onnx")), opts,
                                            providers=["CPUExecutionProvider"])
        self.inputs = (TensorSpec("input", "FP32", (-1, 64)),)
        self.outputs = (TensorSpec("probs", "FP32", (-1, 10)),)

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        return {"probs": self.session.run(None, {"input": inputs["input"]})[0]}


def batcher_throughput(observer: object, seconds: float, clients: int) -> tuple[float, float]:
    """(requests per wall second, process CPU µs per request) through a real DynamicBatcher.

    CPU time per request is the robust figure on a shared machine: other processes' load
    changes wall-clock throughput a lot but this process's CPU per request much less.
    """
    from edge_agent.core.batcher import DynamicBatcher
    from packager.bundle.manifest import BatchingConfig
    batcher = DynamicBatcher(_DoubleBackend(), model="bench", version=1,  # type: ignore[arg-type]
                             config=BatchingConfig(max_batch_size=8, max_queue_size=10_000),
                             observer=observer)  # type: ignore[arg-type]
    x = np.ones((1, 16), np.float32)
    done = [0] * clients
    stop = threading.Event()

    def client(i: int) -> None:
        while not stop.is_set():
            batcher.submit({"x": x}, 1).result()
            done[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    c0 = time.process_time()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    batcher.close()
    return sum(done) / elapsed, cpu / max(sum(done), 1) * 1e6


def inline_cpu_per_request(observer: object, n: int, backend: _DoubleBackend) -> float:
    """Process CPU µs per request with the caller running each request itself (no handoffs)."""
    from edge_agent.core.batcher import DynamicBatcher
    from packager.bundle.manifest import BatchingConfig
    batcher = DynamicBatcher(backend, model="bench", version=1,  # type: ignore[arg-type]
                             config=BatchingConfig(max_batch_size=8, max_queue_size=10_000),
                             observer=observer)  # type: ignore[arg-type]
    spec = backend.inputs[0]
    x = {spec.name: np.ones((1, spec.shape[1]), np.float32)}
    submit = batcher.submit
    c0 = time.process_time()
    for _ in range(n):
        submit(x, 1, caller_runs=True).result()
    cpu = time.process_time() - c0
    batcher.close()
    return cpu / n * 1e6


def bench_batcher(tmp: Path, rounds: int = 4, seconds: float = 2.0, clients: int = 4) -> None:
    try:
        store = MetricsStore.open(tmp / "batcher")
        recorder = MetricsRecorder(store, system=SystemSampler(tmp))
        recorder.start()
        inline: dict[str, tuple[list[float], list[float]]] = {}
        for label, backend in (("trivial y=2x", _DoubleBackend()), ("ORT MLP 64-128-10",
                                                                    _MlpBackend(tmp))):
            offs, ons = inline[label] = ([], [])
            for _ in range(9):  # best of 9, alternating: robust to other processes' load
                offs.append(inline_cpu_per_request(NullObserver(), 20_000, backend))
                ons.append(inline_cpu_per_request(recorder, 20_000, backend))
        nulls, reals = [], []
        for _ in range(rounds):
            nulls.append(batcher_throughput(NullObserver(), seconds, clients))
            reals.append(batcher_throughput(recorder, seconds, clients))
        recorder.stop()
        store.close()
    except (ImportError, TypeError, AttributeError) as exc:
        print(f"batcher throughput: skipped (batcher API changed: {exc})")
        return
    for label, (offs, ons) in inline.items():
        i_null, i_real = min(offs), min(ons)
        print(f"batcher caller-runs path, {label} (one thread, best of 9 x 20k requests, "
              f"writer thread running): {i_null:.2f} µs CPU/request metrics off, "
              f"{i_real:.2f} µs on -> throughput on/off = {i_null / i_real:.3f}")
    n_rps = statistics.median(x[0] for x in nulls)
    r_rps = statistics.median(x[0] for x in reals)
    n_cpu = statistics.median(x[1] for x in nulls)
    r_cpu = statistics.median(x[1] for x in reals)
    print(f"batcher ({clients} clients, trivial y=2x backend so the batcher's own cost "
          f"dominates, {rounds} alternating rounds of {seconds:.0f} s, writer thread running):")
    print(f"  process CPU per request: metrics off {n_cpu:.1f} µs, on {r_cpu:.1f} µs -> "
          f"throughput on/off if CPU-bound = {n_cpu / r_cpu:.3f}")
    print(f"  wall throughput (noisy on a shared machine): off {n_rps:,.0f} req/s, on "
          f"{r_rps:,.0f} req/s (on/off {r_rps / n_rps:.3f}); rounds off "
          f"{[round(x[0]) for x in nulls]}, on {[round(x[0]) for x in reals]}")


def bench_flush(tmp: Path, models: int, per_second: int = 1000, rounds: int = 20) -> None:
    store = MetricsStore.open(tmp / "flush")
    recorder = MetricsRecorder(store, system=SystemSampler(tmp))
    rng = random.Random(1)
    times = []
    ts = int(time.time()) - 100_000
    for r in range(rounds):
        for m in range(models):
            for _ in range(per_second):
                x = int(rng.lognormvariate(14.5, 0.6))
                recorder.record_request(f"model-{m}", 1, ok=True, rows=1, queue_ns=x // 3,
                                        compute_ns=x // 2, total_ns=x)
            recorder.record_batch(f"model-{m}", 1, 8, 1_000_000)
        t0 = time.perf_counter()
        recorder.flush(ts + r)
        times.append(time.perf_counter() - t0)
    store.close()
    med = statistics.median(times)
    print(f"flush ({models} models x 1 version, {per_second} req/s each, incl. psutil "
          f"sample and SQLite commit): median {med * 1e3:.2f} ms per second "
          f"({med * 100:.2f}% of one core)")


def _day_rows(models: int, rng: random.Random) -> list[SecondRow]:
    rows = []
    for m in range(models):
        h = [hist.new_counts() for _ in range(3)]
        for _ in range(50):
            x = int(rng.lognormvariate(14.5, 0.6))
            for k, v in enumerate((x // 3, x // 2, x)):
                h[k][hist.bucket_of(v)] += 1
        rows.append(SecondRow(f"model-{m}", 1, 50, 0, 50, 7, 50, 0, 0, 0, *h))
    return rows


def bench_day(tmp: Path, seconds: int, models: int) -> None:
    path = tmp / "day"
    store = MetricsStore.open(path, rollup_after_s=86_400, retention_s=30 * 86_400,
                              max_bytes=10**12)
    rng = random.Random(2)
    templates = [_day_rows(models, rng) for _ in range(64)]
    start = 1_750_000_000 - 1_750_000_000 % 60
    t0 = time.perf_counter()
    for s in range(seconds):
        store.write(start + s, templates[s % 64])
    elapsed = time.perf_counter() - t0
    store.maintain(now=start + seconds)  # nothing old enough yet: just checkpoints the WAL
    size_day = store.path.stat().st_size
    rows = store.row_count()
    t1 = time.perf_counter()
    report = store.maintain(now=start + seconds + 86_400)  # all of it is now older than a day
    rollup_s = time.perf_counter() - t1
    size_after = store.path.stat().st_size
    print(f"write capacity: {rows / elapsed:,.0f} rows/s ({models} rows per transaction, "
          f"one transaction per simulated second)")
    print(f"DB after {seconds:,} s x {models} models: {rows:,} rows, {size_day / 2**20:.1f} MiB "
          f"({size_day / rows:.0f} B/row); after minute rollup: {store.row_count():,} rows, "
          f"{size_after / 2**20:.2f} MiB (rolled {report.rolled_up_rows:,} rows in "
          f"{rollup_s:.1f} s, file {size_day / max(size_after, 1):.0f}x smaller)")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=86_400,
                        help="simulated seconds of history (default: one day)")
    parser.add_argument("--models", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_hot_path()
        bench_batcher(tmp)
        bench_flush(tmp, args.models)
        bench_day(tmp, args.seconds, args.models)


if __name__ == "__main__":
    main()
