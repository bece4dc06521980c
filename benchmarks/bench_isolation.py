"""What process isolation costs and buys, as ratios measured in one run on this machine.

    PYTHONPATH=. python -m benchmarks.bench_isolation            # ~1-2 minutes
    PYTHONPATH=. python -m benchmarks.bench_isolation --rounds 5

For the MLP and the light squeezenet (OpenVINO bundles, dynamic batch), the same backend is
loaded in the agent's process (``isolation = "thread"``) and in runtime processes
(``"process"``), and, interleaved over rounds (medians):
  * time per execution at batch 1 (and 8 for squeezenet), and the calling process's CPU;
  * memory: RSS of the calling process + its runtime processes (and PSS where readable, which
    counts shared library pages once), with two instances loaded;
  * replacement: after ``cancel`` (what the watchdog does to a hung run), the time until the
    instance serves again.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from edge_agent.backends.base import BackendOptions
from edge_agent.backends.registry import load_backend
from edge_agent.core.repository import load_manifest
from edge_agent.errors import BackendError
from packager.build import build_bundles
from packager.bundle.reader import open_bundle
from tests.support.model_factory import LIGHT_BUILD, light_model_path, make_mlp

PROFILE = "x86_64-cpu-openvino"


def _install(bundle: Path, state: Path) -> Path:
    with open_bundle(bundle) as reader:
        m = reader.manifest
        return reader.extract(state / "models" / m.name / str(m.version))


def _memory_mb(pids: list[int]) -> tuple[float, float]:
    rss = pss = 0.0
    for pid in pids:
        p = psutil.Process(pid)
        rss += p.memory_info().rss
        try:
            pss += p.memory_full_info().pss
        except (psutil.AccessDenied, AttributeError):
            pss = float("nan")
    return rss / 2**20, pss / 2**20


def _time_calls(backend, inputs: dict[str, np.ndarray], seconds: float) -> tuple[float, float]:
    """(ms per execution, calling-process CPU ms per execution)."""
    for _ in range(5):
        backend.infer(inputs, 0)
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        backend.infer(inputs, 0)
        n += 1
    return ((time.perf_counter() - t0) / n * 1e3, (time.process_time() - c0) / n * 1e3)


def measure(model_dir: Path, shape: tuple[int, ...], batches: tuple[int, ...], rounds: int,
            seconds: float) -> None:
    manifest = load_manifest(model_dir)
    name = manifest.inputs[0].name
    rng = np.random.default_rng(0)
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for mode in ("thread", "process"):
            backend = load_backend(model_dir, manifest, BackendOptions(), isolation=mode)
            try:
                for b in batches:
                    x = {name: rng.standard_normal((b, *shape)).astype(np.float32)}
                    results.setdefault((mode, b), []).append(_time_calls(backend, x, seconds))
            finally:
                backend.close()
    for b in batches:
        t = [statistics.median(r[0] for r in results[("thread", b)]),
             statistics.median(r[1] for r in results[("thread", b)])]
        p = [statistics.median(r[0] for r in results[("process", b)]),
             statistics.median(r[1] for r in results[("process", b)])]
        print(f"  batch {b}: in-process {t[0]:.3f} ms/exec (cpu {t[1]:.3f}), runtime process "
              f"{p[0]:.3f} ms/exec (agent cpu {p[1]:.3f}): x{p[0] / t[0]:.2f}, "
              f"+{(p[0] - t[0]) * 1e3:.0f} us")
    me = psutil.Process().pid
    for mode in ("thread", "process"):
        base = _memory_mb([me])
        backend = load_backend(model_dir, manifest, BackendOptions(instances=2), isolation=mode)
        try:
            x = {name: rng.standard_normal((1, *shape)).astype(np.float32)}
            for i in (0, 1):
                backend.infer(x, i)
            pids = [me, *getattr(backend, "pids", [])]
            rss, pss = _memory_mb(pids)
            print(f"  memory, 2 instances, {mode}: RSS {rss - base[0]:.0f} MiB over the "
                  f"caller's {base[0]:.0f}, PSS {pss - base[1]:.0f} MiB "
                  f"({len(pids) - 1} runtime processes)")
            if mode == "process":
                times = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    psutil.Process(backend.pids[0]).kill()  # what cancel does to a hung run
                    with contextlib.suppress(BackendError):
                        backend.infer(x, 0)  # the killed run fails...
                    backend.infer(x, 0)  # ...and this one waits for the replacement
                    times.append(time.perf_counter() - t0)
                print(f"  cancel -> replacement serving: median {statistics.median(times):.2f} s"
                      f" (3 kills)")
        finally:
            backend.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args(argv)
    print(f"load average {' '.join(f'{x:.1f}' for x in psutil.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        mlp = make_mlp(work / "mlp.onnx", seed=1)
        (mb,) = build_bundles(mlp, name="mlp", version=1, profiles=[PROFILE],
                              out_dir=work / "out")
        (sb,) = build_bundles(light_model_path("squeezenet"), name="squeezenet", version=1,
                              profiles=[PROFILE], out_dir=work / "out", dynamic_batch=True,
                              **LIGHT_BUILD)
        print("MLP (OpenVINO):")
        measure(_install(mb, work / "state"), (64,), (1,), args.rounds, args.seconds)
        print("squeezenet (OpenVINO):")
        measure(_install(sb, work / "state"), (3, 224, 224), (1, 8), args.rounds,
                args.seconds)
    print(f"load average {' '.join(f'{x:.1f}' for x in psutil.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
