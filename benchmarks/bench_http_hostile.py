"""What hostile HTTP callers cost the agent (issue 27), measured on one agent subprocess.

    python -m benchmarks.bench_http_hostile                      # ~2 minutes
    python -m benchmarks.bench_http_hostile --tree /work/main    # the agent from another tree

Starts ``edge-agent serve --http 127.0.0.1:0`` (default settings) with the MLP (ONNX Runtime)
from ``--tree`` (default: this checkout) and reports:
  * amplification: one gzip body inflating to ``max_body_bytes`` of JSON padded with empty
    arrays: its answer, time, and the agent's peak RSS growth (sampled every 5 ms);
  * the gRPC stall: a c=1 gRPC ModelInfer caller's p50/p99/max latency alone, then while
    ``--flooders`` processes send such bodies back to back, then while they send the largest
    body of dense JSON numbers the agent parses; and, as a control, while they send health
    checks back to back (what any request flood costs on this machine);
  * duplicate outputs: 40,000 output names in one request: answer and time;
  * slowloris: 64 connections trickling a byte every 2 s for ``--slow-s`` seconds, a
    ``/v2/health/live`` check every 0.5 s meanwhile: how many got 200;
  * ``Content-Length: ²``: the answer;
  * /metrics flood: the gRPC caller's p50/p99 while 8 processes scrape back to back.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from benchmarks.attacks.http_hostile import (
    Slowloris,
    amplification_body,
    duplicate_outputs_body,
    get,
    post,
    raw_exchange,
)
from benchmarks.bench_http import READY, build_state
from benchmarks.bench_serve import ROOT, stop_process
from benchmarks.loadgen import INFER_METHOD, infer_request_bytes

INFER = "/v2/models/mlp/versions/1/infer"
DENSE_VALUES = 250_000


@contextmanager
def agent(tree: Path, state: Path) -> Iterator[tuple[str, str, int]]:
    """The agent of ``tree`` serving ``state``: (gRPC target, HTTP address, pid)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    popen = subprocess.Popen([sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir",
                              str(state), "--grpc", "127.0.0.1:0", "--no-uds", "--management",
                              "none", "--http", "127.0.0.1:0"], env=env, cwd=tree,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert popen.stdout is not None
        line = popen.stdout.readline()
        match = READY.search(line)
        if match is None:
            raise SystemExit(f"the agent did not start: {line!r}")
        yield match["grpc"], match["http"], popen.pid
    finally:
        stop_process(popen)


class RssPeak:
    """The process's RSS sampled every 5 ms on a thread: ``peak`` over ``start``."""

    def __init__(self, pid: int) -> None:
        self._proc = psutil.Process(pid)
        self.start = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def grpc_latencies(target: str, seconds: float) -> list[float]:
    """Latencies (s) of ModelInfer at one in flight for ``seconds`` (2 s deadline each; a
    timed-out call counts as 2 s)."""
    import grpc

    payload = infer_request_bytes("mlp", {"input": np.zeros((1, 64), np.float32)}, "1")
    out: list[float] = []
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(INFER_METHOD, request_serializer=None,
                                   response_deserializer=None)
        for _ in range(20):
            call(payload, timeout=30)
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            with suppress(grpc.RpcError):
                call(payload, timeout=2.0)
            out.append(time.perf_counter() - t0)
    return out


def summary(lat: list[float]) -> str:
    """p50/p99/max in ms and the count."""
    ms = sorted(x * 1e3 for x in lat)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (f"p50 {statistics.median(ms):6.2f} ms  p99 {p99:7.2f} ms  max {ms[-1]:7.2f} ms  "
            f"({len(ms)} calls, {sum(1 for x in ms if x >= 2000)} at the 2 s deadline)")


def _flood(kind: str, address: str, max_body: int, stop: Any) -> None:
    """One flooder process: ``kind`` requests back to back until ``stop`` is set."""
    work: Callable[[], object]
    if kind == "bomb":
        bomb = amplification_body(max_body)
        work = lambda: post(address, INFER, bomb, {"Content-Encoding": "gzip"})  # noqa: E731
    elif kind == "dense":
        dense = dense_json(DENSE_VALUES)
        work = lambda: post(address, INFER, dense, {})  # noqa: E731
    elif kind == "health":
        work = lambda: get(address, "/v2/health/live")  # noqa: E731
    else:
        work = lambda: get(address, "/metrics")  # noqa: E731
    while not stop.is_set():
        work()


def under(kind: str, processes: int, address: str, max_body: int, target: str,
          seconds: float) -> str:
    """The gRPC caller's latency summary while ``processes`` flooder processes (not threads:
    the caller keeps its own GIL) send ``kind`` requests."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    started = [ctx.Process(target=_flood, args=(kind, address, max_body, stop), daemon=True)
               for _ in range(processes)]
    for p in started:
        p.start()
    try:
        time.sleep(2.0)  # the flooders import and start
        return summary(grpc_latencies(target, seconds))
    finally:
        stop.set()
        for p in started:
            p.join(300)
            if p.is_alive():
                p.kill()


def dense_json(values: int) -> bytes:
    """A valid request whose 'data' holds ``values`` numbers (refused for its shape)."""
    return (b'{"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":['
            + b"0.5," * (values - 1) + b"0.5]}]}")


def slowloris(address: str, seconds: float) -> None:
    """64 slow connections for ``seconds``, a health check every 0.5 s meanwhile."""
    slow = Slowloris(address)
    health: dict[int, int] = {}
    stop_at = time.monotonic() + seconds
    next_tick = 0.0
    try:
        while time.monotonic() < stop_at:
            if time.monotonic() >= next_tick:
                slow.tick()
                next_tick = time.monotonic() + slow.every_s
            code = get(address, "/v2/health/live", timeout=10)
            health[code] = health.get(code, 0) + 1
            time.sleep(0.5)
    finally:
        slow.close()
    print(f"slowloris (64 connections, a byte every 2 s, {seconds:.0f} s): health "
          f"answers {dict(sorted(health.items()))}; {slow.closed} slow connections closed "
          "by the agent", flush=True)


def amplification(address: str, bomb: bytes, pid: int) -> None:
    """One amplification request: its answer, time and the agent's peak RSS growth."""
    with RssPeak(pid) as rss:
        t0 = time.perf_counter()
        status = post(address, INFER, bomb, {"Content-Encoding": "gzip"})
        took = time.perf_counter() - t0
    print(f"amplification: HTTP {status} in {took:.2f} s, agent RSS "
          f"+{(rss.peak - rss.start) / 2**20:.1f} MiB at peak", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree of the agent")
    ap.add_argument("--seconds", type=float, default=8.0, help="per gRPC latency window")
    ap.add_argument("--flooders", type=int, default=4)
    ap.add_argument("--slow-s", type=float, default=24.0)
    ap.add_argument("--max-body", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--skip", default="", help="comma-separated phases to skip: amplification, "
                    "control, flood, dense, outputs, length, slowloris, metrics")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    bomb = amplification_body(args.max_body)
    with tempfile.TemporaryDirectory() as tmp, \
            agent(args.tree.resolve(), build_state(Path(tmp))) as (target, address, pid):
        print(f"agent from {args.tree}; gzip body {len(bomb)} bytes inflating to "
              f"~{args.max_body >> 20} MiB", flush=True)
        if "amplification" not in skip:
            amplification(address, bomb, pid)
        print(f"gRPC c=1 alone:             {summary(grpc_latencies(target, args.seconds))}",
              flush=True)
        floods = (("control", "health", "health-check flooders (control)"),
                  ("flood", "bomb", "amplification flooders"),
                  ("dense", "dense", f"flooders of {len(dense_json(DENSE_VALUES)) >> 10} KiB "
                                     "dense JSON"))
        for phase, kind, what in floods:
            if phase not in skip:
                print(f"gRPC c=1, {args.flooders} {what}: " + under(
                    kind, args.flooders, address, args.max_body, target, args.seconds),
                    flush=True)
        if "outputs" not in skip:
            body = duplicate_outputs_body()
            t0 = time.perf_counter()
            status = post(address, INFER, body, {})
            print(f"duplicate outputs ({len(body) >> 10} KiB, 40,000 names): HTTP {status} in "
                  f"{time.perf_counter() - t0:.2f} s", flush=True)
        if "length" not in skip:
            answer = raw_exchange(address, f"POST {INFER} HTTP/1.1\r\nHost: x\r\n"
                                  "Content-Length: \u00b2\r\n\r\n".encode("latin-1"))
            first = answer.split(b"\r\n", 1)[0].decode("latin-1")
            print(f"Content-Length: \u00b2 -> {first or 'connection dropped, no answer'}",
                  flush=True)
        if "slowloris" not in skip:
            slowloris(address, args.slow_s)
        if "metrics" not in skip:
            print("gRPC c=1, 8 /metrics scrapers:  "
                  + under("metrics", 8, address, args.max_body, target, args.seconds),
                  flush=True)
        print(f"gRPC c=1 alone (again):     {summary(grpc_latencies(target, args.seconds))}",
              flush=True)
        rss_now = psutil.Process(pid).memory_info().rss
        print(f"agent RSS at the end: {rss_now / 2**20:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
