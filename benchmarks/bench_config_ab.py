"""Serving A/B between two agent.toml files, this checkout, interleaved in one run.

    python -m benchmarks.bench_config_ab --b-toml B.toml [--a-toml A.toml] [-c 1] [--rounds 6]
    printf '[models.mlp]\\nthreads = 1\\n' > /tmp/one.toml
    python -m benchmarks.bench_config_ab --b-toml /tmp/one.toml -c 1   # one intra-op thread

Two ``edge-agent serve`` processes on identical state directories (bench_serve's models), each
with its own configuration (A: none by default), over their Unix sockets; each round loads one,
then the other, with bench_serve's closed loop on the MLP at ``-c`` in flight, and prints the
per-round and median p50 / throughput ratios B/A and the server CPU per request.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.bench_serve import Proc, install_models, load
from benchmarks.loadgen import LoadResult, infer_request_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a-toml", type=Path, help="A's agent.toml (default: none)")
    parser.add_argument("--b-toml", type=Path, required=True, help="B's agent.toml")
    parser.add_argument("-c", "--concurrency", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-config-ab-") as tmp:
        work = Path(tmp)
        states = [work / "a", work / "b"]
        install_models(work, states)
        agents: dict[str, tuple[Proc, str]] = {}
        try:
            for label, state, toml in (("A", states[0], args.a_toml),
                                       ("B", states[1], args.b_toml)):
                sock = work / f"{label}.sock"
                config = ["--config", str(toml)] if toml else []
                agents[label] = (Proc(["-m", "edge_agent.cli", "serve", "--state-dir",
                                       str(state), *config, "--grpc", "off", "--uds",
                                       str(sock), "--no-mdns"], "edge-agent ready"),
                                 f"unix:{sock}")
            payload = infer_request_bytes("mlp", {"input": np.zeros((1, 64), np.float32)})
            runs: dict[str, list[LoadResult]] = {label: [] for label in agents}
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            for _ in range(args.rounds):
                for label, (proc, target) in agents.items():
                    result = load(target, payload, args.concurrency, args.seconds,
                                  proc.popen.pid)
                    runs[label].append(result)
                    print(f"  {label} {result.line()}", flush=True)
        finally:
            for proc, _ in agents.values():
                proc.stop()
    a, b = runs["A"], runs["B"]
    print(f"load average {os.getloadavg()[0]:.1f} at the end; B = {args.b_toml}")
    for label, v in runs.items():
        print(f"{label}: median p50 {statistics.median(r.p50_ms for r in v):.3f} ms, "
              f"{statistics.median(r.throughput for r in v):.0f} infer/s, server CPU "
              f"{statistics.median(r.cpu_us_per_request or 0 for r in v):.0f} us/request")
    print("per-round p50 B/A: " + ", ".join(f"{y.p50_ms / x.p50_ms:.2f}"
                                             for x, y in zip(a, b, strict=True)))
    print("per-round throughput B/A: " + ", ".join(f"{y.throughput / x.throughput:.2f}"
                                                   for x, y in zip(a, b, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
