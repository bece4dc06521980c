"""Serving A/B between two checkouts of this repository, interleaved in one run.

    python -m benchmarks.bench_ab --before ../before-checkout            # this tree is "after"
    python -m benchmarks.bench_ab --before DIR --after DIR --rounds 5 --seconds 3

Two ``edge-agent serve`` processes run side by side, each from its own checkout
(``PYTHONPATH``), on identical state directories (the MLP and the light squeezenet, ONNX
Runtime and OpenVINO profiles, installed by the "after" checkout's ``add-bundle``). Each round
loads one agent, then the other, with the same closed-loop load generator as bench_serve.py
(MLP c=1 over TCP for latency, MLP c=16 and squeezenet c=16 over the Unix socket for
throughput), and prints per-round and median ratios after/before. On a shared, noisy machine
only ratios measured this way (interleaved, same load) compare two versions of the code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.bench_serve import _cpu_s, install_models, stop_process
from benchmarks.loadgen import LoadResult, infer_request_bytes, run_load

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Side:
    """One agent process serving from one checkout."""

    name: str
    checkout: Path
    state: Path
    sock: Path
    popen: subprocess.Popen[str] | None = None
    tcp: str = ""

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(self.checkout)}
        args = [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir", str(self.state),
                "--grpc", "127.0.0.1:0", "--uds", str(self.sock), "--no-mdns"]
        self.popen = subprocess.Popen(args, env=env, cwd=self.checkout, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if "ready" not in line:
            self.stop()
            raise SystemExit(f"{self.name}: the agent did not start: {line!r}")
        for part in line.replace(";", " ").replace(",", " ").split():
            if part.startswith("127.0.0.1:"):
                self.tcp = part
                break

    def stop(self) -> None:
        if self.popen is not None:
            stop_process(self.popen)


def _load(target: str, payload: bytes, c: int, seconds: float, pid: int) -> LoadResult:
    """One closed-loop run after a short warm-up, with the server's CPU per request (its
    runtime processes included): CPU moves much less than wall-clock figures under noise."""
    asyncio.run(run_load(target, payload, concurrency=c, seconds=0.5, warmup=0.0))
    cpu0 = _cpu_s(pid)
    result = asyncio.run(run_load(target, payload, concurrency=c, seconds=seconds, warmup=0.0))
    if result.requests:
        result.cpu_us_per_request = (_cpu_s(pid) - cpu0) * 1e6 / result.requests
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare to")
    parser.add_argument("--after", type=Path, default=ROOT, help="default: this checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    cases = [  # (label, model, input, transport, concurrency, figure)
        ("MLP c=1 TCP p50", "mlp", rng.standard_normal((1, 64)).astype(np.float32), "tcp", 1,
         "p50"),
        ("MLP c=16 UDS", "mlp", rng.standard_normal((1, 64)).astype(np.float32), "uds", 16,
         "throughput"),
        ("squeezenet ORT c=16 UDS", "squeezenet",
         rng.standard_normal((1, 3, 224, 224)).astype(np.float32), "uds", 16, "throughput"),
        ("squeezenet OV c=16 UDS", "squeezenet_ov",
         rng.standard_normal((1, 3, 224, 224)).astype(np.float32), "uds", 16, "throughput"),
    ]
    input_name = {"mlp": "input", "squeezenet": "data_0", "squeezenet_ov": "data_0"}
    work = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    sides = [Side("before", args.before.resolve(), work / "before", work / "before.sock"),
             Side("after", args.after.resolve(), work / "after", work / "after.sock")]
    try:
        install_models(work, [s.state for s in sides])
        for side in sides:
            side.start()
        ratios: dict[str, list[float]] = {label: [] for label, *_ in cases}
        cpu: dict[str, dict[str, list[float]]] = {label: {"before": [], "after": []}
                                                  for label, *_ in cases}
        for r in range(args.rounds):
            for label, model, x, transport, c, figure in cases:
                payload = infer_request_bytes(model, {input_name[model]: x})
                got = {}
                order = sides if r % 2 == 0 else sides[::-1]  # alternate who goes first
                for side in order:
                    target = side.tcp if transport == "tcp" else f"unix:{side.sock}"
                    assert side.popen is not None
                    res = _load(target, payload, c, args.seconds, side.popen.pid)
                    if res.cpu_us_per_request is not None:
                        cpu[label][side.name].append(res.cpu_us_per_request)
                    if res.errors:
                        print(f"  {side.name} {label}: {res.errors} errors ({res.first_error})")
                    got[side.name] = res.p50_ms if figure == "p50" else res.throughput
                # ratio > 1 means "after" is better for throughput; for p50, before/after
                ratio = (got["before"] / got["after"] if figure == "p50"
                         else got["after"] / got["before"])
                ratios[label].append(ratio)
                print(f"round {r + 1} {label:<26} before {got['before']:9.2f}  after "
                      f"{got['after']:9.2f}  after vs before {ratio:5.2f}x", flush=True)
        print("\nmedian over rounds (>1: after is better; p50 as before/after):")
        for label, values in ratios.items():
            before_cpu = statistics.median(cpu[label]["before"] or [float("nan")])
            after_cpu = statistics.median(cpu[label]["after"] or [float("nan")])
            print(f"  {label:<26} {statistics.median(values):5.2f}x  "
                  f"(rounds {', '.join(f'{v:.2f}' for v in values)}); server CPU per request "
                  f"before {before_cpu:.0f} us, after {after_cpu:.0f} us")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
              f"{time.strftime('%Y-%m-%d %H:%M')}")
    finally:
        for side in sides:
            side.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
