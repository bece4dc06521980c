"""A 200-tree XGBoost classifier served by the agent vs native ``xgboost`` predict in-process.

The classifier (digits, 10 classes, 200 rounds: 2000 trees) is saved as JSON, built with
``edge-pack build`` for x86_64-cpu-onnxruntime (ONNX-ML TreeEnsembleClassifier) and served by
a real agent on a Unix socket; the load generator keeps 16 requests in flight at batch 1 and at
batch 64 rows per request. Native: ``Booster.inplace_predict`` on the same rows in this
process, one call at a time (what an app embedding xgboost does), with one OpenMP thread and
with all cores (on a busy machine its spinning threads cost it dearly). Rows per second, median
of ``--rounds`` interleaved rounds, and the ratio served / native.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_trees --seconds 3 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_serve import ORT, Proc, load
from benchmarks.loadgen import infer_request_bytes

ROUNDS = 200
IN_FLIGHT = 16


def train(work: Path) -> tuple[Path, np.ndarray]:
    """The saved classifier and rows to predict."""
    import xgboost as xgb
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    clf = xgb.XGBClassifier(n_estimators=ROUNDS, max_depth=6, random_state=0)
    clf.fit(x, y)
    path = work / "xgb200.json"
    clf.save_model(str(path))
    return path, x


def native_rate(model: Path, rows: np.ndarray, seconds: float, threads: int) -> float:
    """Rows per second of ``Booster.inplace_predict`` called back to back (``threads``: its
    OpenMP threads, 0 = all cores)."""
    import xgboost as xgb

    booster = xgb.Booster()
    booster.load_model(str(model))
    booster.set_param({"nthread": threads})
    booster.inplace_predict(rows)
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        booster.inplace_predict(rows)
        n += 1
    return n * len(rows) / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    args = ap.parse_args(argv)
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles

    with tempfile.TemporaryDirectory(prefix="bench-trees-") as tmp:
        work = Path(tmp)
        model, x = train(work)
        [bundle] = build_bundles(model, name="xgb", version=1, profiles=[ORT],
                                 out_dir=work / "out", max_batch=64)
        state = work / "state"
        if agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned",
                      str(bundle)]):
            raise SystemExit("add-bundle failed")
        sock = work / "agent.sock"
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state), "--grpc",
                      "127.0.0.1:0", "--uds", str(sock)], "edge-agent ready")
        print(f"{ROUNDS}-round XGBoost classifier ({ROUNDS * 10} trees, depth 6); agent ready "
              f"in {agent.ready_s:.2f} s; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores")
        served: dict[int, list[float]] = {1: [], 64: []}
        native: dict[tuple[int, int], list[float]] = {(b, t): [] for b in (1, 64)
                                                      for t in (1, 0)}
        try:
            for _ in range(args.rounds):
                for b in (1, 64):
                    payload = infer_request_bytes("xgb", {"input": x[:b]})
                    r = load(f"unix:{sock}", payload, IN_FLIGHT, args.seconds, agent.pid)
                    served[b].append(r.throughput * b)
                    for t in (1, 0):
                        native[b, t].append(native_rate(model, x[:b], args.seconds, t))
        finally:
            agent.stop()
        print(f"{'batch':>5} {'served rows/s (16 in flight)':>29} {'native 1 thread':>16} "
              f"{'ratio':>6} {'native all cores':>17} {'ratio':>6}")
        for b in (1, 64):
            s = statistics.median(served[b])
            n1, n0 = (statistics.median(native[b, t]) for t in (1, 0))
            print(f"{b:5d} {s:29.0f} {n1:16.0f} {s / n1:6.2f} {n0:17.0f} {s / n0:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
