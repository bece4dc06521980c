"""Server CPU per request of servers already running, under the anchor's lean client.

    python -m benchmarks.anchor_cpu --server triton=127.0.0.1:8001:PID \\
        --server agent-uds=unix:///tmp/x/i.sock:PID [--rounds 3] [--seconds 6] [-c 16]

For each ``--server LABEL=TARGET:PID`` (PID: the server's process; its children count too, e.g.
Triton's python backend stubs), runs ``../shared/anchor/fastgen.py`` (the anchor's lean client,
with ``/tmp/bench/bin/python``, or ``--client-python``) on the anchor's MLP (input ``x``,
named so that a server without ModelMetadata, the bare echo, can be driven too) at ``-c`` in flight,
interleaved over rounds, and prints the throughput and the server's CPU per request (process
tree user + system time over the run, the client's warm-up included in neither).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

from benchmarks.bench_serve import _cpu_s

ANCHOR = Path(__file__).resolve().parents[2] / "shared" / "anchor"


def run_once(python: str, target: str, pid: int, concurrency: int,
             seconds: float) -> tuple[float, float, float]:
    """One fastgen run after its warm-up: (infer/s, server CPU us per request, p50 ms)."""
    warm = [python, str(ANCHOR / "fastgen.py"), "--url", target, "--model", "mlp",
            "--shape", "1,256", "--input", "x", "-c", str(concurrency), "--warmup", "0"]
    subprocess.run([*warm, "-s", "1"], check=True, capture_output=True)
    cpu0 = _cpu_s(pid)
    out = subprocess.run([*warm, "-s", str(seconds)], check=True, capture_output=True,
                         text=True).stdout
    cpu = _cpu_s(pid) - cpu0
    result = json.loads(out.strip().splitlines()[-1])
    requests = result["infer_s"] * seconds
    return (result["infer_s"], cpu * 1e6 / requests if requests else float("nan"),
            result["p50_ms"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", action="append", required=True,
                        metavar="LABEL=TARGET:PID")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("-c", "--concurrency", type=int, default=16)
    parser.add_argument("--client-python", default="/tmp/bench/bin/python")
    args = parser.parse_args(argv)
    servers = []
    for spec in args.server:
        label, _, rest = spec.partition("=")
        target, _, pid = rest.rpartition(":")
        servers.append((label, target, int(pid)))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    runs: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _, _ in servers}
    for _ in range(args.rounds):
        for label, target, pid in servers:
            runs[label].append(run_once(args.client_python, target, pid, args.concurrency,
                                        args.seconds))
            rate, cpu, p50 = runs[label][-1]
            print(f"  {label:10s} {rate:8.1f} infer/s  {cpu:6.0f} us server CPU/request  "
                  f"p50 {p50:.3f} ms")
    print(f"medians, MLP c={args.concurrency}; load average {os.getloadavg()[0]:.1f} at the end")
    for label, values in runs.items():
        print(f"{label:10s} {statistics.median(v[0] for v in values):8.1f} infer/s  "
              f"{statistics.median(v[1] for v in values):6.0f} us server CPU/request  "
              f"p50 {statistics.median(v[2] for v in values):.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
