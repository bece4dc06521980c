"""Build time, bundle size and in-process throughput per CPU profile, in one run.

    .venv/bin/python benchmarks/bench_build.py [--budget SECONDS]

For squeezenet (batch made dynamic) and the random-weight MLP from tests/support/model_factory.py:
build one bundle per CPU profile (timed), then load each bundle's primary artifact with its
runtime and measure items/s at batch 1, 8 and 32 next to the source model (ONNX Runtime fp32).
Figures are ratios within this run on this machine; arm64 profiles are measured on the host CPU.
"primary" is the size of the primary backend's artifact (the bundle also holds the fallback).
The MLP here is a wider one (256-1024-100) than the test default, so weights dominate sizes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from packager.build import build_bundles  # noqa: E402
from packager.bundle.parity import (  # noqa: E402
    Runner,
    onnxruntime_runner,
    openvino_runner,
    seeded_inputs,
)
from packager.bundle.reader import open_bundle  # noqa: E402
from packager.onnx_tools import io_signature, load_model, make_batch_dynamic  # noqa: E402
from tests.support.model_factory import light_model_path, make_mlp  # noqa: E402

PROFILES = ("x86_64-cpu-onnxruntime", "x86_64-cpu-openvino", "x86_64-cpu-openvino-fp16",
            "arm64-cpu-onnxruntime", "arm64-cpu-onnxruntime-int8")
BATCHES = (1, 8, 32)


def throughput(run: Runner, feeds: dict, batch: int, budget: float) -> float:
    """Items per second of ``run`` on ``feeds`` over about ``budget`` seconds."""
    n, start = 0, time.perf_counter()
    while True:
        run(feeds)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget and n >= 2:
            return n * batch / elapsed


def runner_for(manifest, root: Path) -> Runner:
    entry = root / manifest.artifacts[manifest.backend]
    if manifest.backend == "openvino":
        return openvino_runner(entry, "f32", hint="THROUGHPUT")
    return onnxruntime_runner(entry)


def primary_bytes(manifest) -> int:
    prefix = f"artifacts/{manifest.backend}/"
    return sum(f.size for f in manifest.files if f.path.startswith(prefix))


def bench_model(label: str, model_path: Path, dynamic: bool, work: Path, budget: float,
                rounds: int) -> list[dict]:
    import onnx

    src = load_model(model_path)
    if dynamic:
        src = make_batch_dynamic(src)
    src_path = work / f"{label}-source.onnx"
    onnx.save(src, str(src_path))
    inputs = io_signature(src)[0]
    rows = [{"model": label, "profile": "source (ORT fp32)", "build_s": None,
             "size": model_path.stat().st_size, "primary": model_path.stat().st_size,
             "run": onnxruntime_runner(src_path)}]
    for profile in PROFILES:
        t0 = time.perf_counter()
        (bundle,) = build_bundles(model_path, name=label, version=1, profiles=[profile],
                                  out_dir=work / "dist", dynamic_batch=dynamic,
                                  allow_parity_failure=dynamic)  # light CNN: support/model_factory
        build_s = time.perf_counter() - t0
        with open_bundle(bundle) as r:
            manifest = r.manifest
            root = r.extract(work / "x" / f"{label}-{profile}")
        rows.append({"model": label, "profile": profile, "build_s": build_s,
                     "size": bundle.stat().st_size, "primary": primary_bytes(manifest),
                     "run": runner_for(manifest, root),
                     "err": manifest.parity["artifacts"][manifest.backend]["max_abs_error"]})
    # interleave: every round measures every artifact once per batch size; keep the best round
    # (the machine is shared, so the best of several short runs is the least disturbed one)
    for b in BATCHES:
        feeds = seeded_inputs(inputs, b)
        for row in rows:
            row["run"](feeds)  # warm-up
        for _ in range(rounds):
            for row in rows:
                tp = throughput(row["run"], feeds, b, budget / rounds)
                row[f"b{b}"] = max(row.get(f"b{b}", 0.0), tp)
    for row in rows:
        for b in BATCHES:
            row[f"r{b}"] = row[f"b{b}"] / rows[0][f"b{b}"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=1.5,
                    help="seconds per artifact and batch size (default 1.5)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        mlp = make_mlp(work / "mlp.onnx", in_features=256, hidden=1024, out_features=100)
        rows = bench_model("mlp", mlp, False, work, args.budget, args.rounds)
        rows += bench_model("squeezenet", light_model_path("squeezenet"), True, work,
                            args.budget, args.rounds)

    head = (f"{'model':<11} {'profile':<27} {'build s':>7} {'bundle KiB':>10} {'primary':>8} "
            + " ".join(f"{'b' + str(b) + ' it/s':>10} {'x src':>6}" for b in BATCHES)
            + f" {'max abs err':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        build = f"{r['build_s']:.2f}" if r["build_s"] is not None else "-"
        err = f"{r['err']:.2e}" if "err" in r else "-"
        print(f"{r['model']:<11} {r['profile']:<27} {build:>7} {r['size'] / 1024:>10.1f} "
              f"{r['primary'] / 1024:>8.1f} "
              + " ".join(f"{r[f'b{b}']:>10.1f} {r[f'r{b}']:>6.2f}" for b in BATCHES)
              + f" {err:>11}")


if __name__ == "__main__":
    main()
