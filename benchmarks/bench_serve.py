"""Serving figures of edge-agent, as ratios measured in one run on this machine.

    python -m benchmarks.bench_serve            # ~2 minutes; --seconds to shorten/lengthen

Starts the agent as a subprocess (``edge-agent serve``) on bundles built from the MLP and the
light squeezenet (dynamic batch) and drives it with benchmarks.loadgen (one asyncio process,
request serialized once, identity serializers). Prints, next to each served figure:
  * squeezenet (ORT and OpenVINO profiles), c=16 over the Unix socket vs the best in-process
    runtime throughput at batch 1 and 8 (target >= 0.9x);
  * MLP c=1 over TCP: p50 latency vs the naive one-at-a-time server (target <= 1.15x);
  * MLP c=16 over the Unix socket: throughput vs the naive server (target >= 1.7x);
  * agent start-to-ready time and RSS with the MLP and squeezenet loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from benchmarks.loadgen import LoadResult, infer_request_bytes, run_load

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ORT = "x86_64-cpu-onnxruntime"
OV = "x86_64-cpu-openvino"


def build_state(work: Path) -> tuple[Path, Path]:
    """Bundles for mlp (ORT), squeezenet (ORT) and squeezenet_ov (OV) installed in a state dir."""
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles
    from tests.model_factory import light_model_path, make_mlp

    mlp = make_mlp(work / "mlp.onnx", seed=1)
    squeeze = light_model_path("squeezenet")
    out = work / "bundles"
    bundles = build_bundles(mlp, name="mlp", version=1, profiles=[ORT], out_dir=out)
    bundles += build_bundles(squeeze, name="squeezenet", version=1, profiles=[ORT],
                             out_dir=out, dynamic_batch=True)
    bundles += build_bundles(squeeze, name="squeezenet_ov", version=1, profiles=[OV],
                             out_dir=out, dynamic_batch=True)
    state = work / "state"
    for b in bundles:
        if agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned", str(b)]):
            raise SystemExit(f"add-bundle {b} failed")
    return state, mlp


class Proc:
    """A server subprocess that prints one ready line; stopped with SIGTERM."""

    def __init__(self, args: list[str], ready: str) -> None:
        self.t0 = time.perf_counter()
        self.popen = subprocess.Popen([sys.executable, *args], env=ENV, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
        line = self.popen.stdout.readline()
        self.ready_s = time.perf_counter() - self.t0
        if ready not in line:
            self.stop()
            raise SystemExit(f"{args[:3]} did not start: {line!r}")
        self.line = line

    def rss_mb(self) -> float:
        return psutil.Process(self.popen.pid).memory_info().rss / 2**20

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def _cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def load(target: str, payload: bytes, c: int, seconds: float,
         pid: int | None = None) -> LoadResult:
    """One closed-loop run (1 s warm-up); with ``pid``, also the server's CPU per request,
    which stays comparable when other work on the machine steals cycles."""
    asyncio.run(run_load(target, payload, concurrency=c, seconds=1.0, warmup=0.0))
    cpu0 = _cpu_s(pid) if pid else 0.0
    result = asyncio.run(run_load(target, payload, concurrency=c, seconds=seconds, warmup=0.0))
    if pid and result.requests:
        result.cpu_us_per_request = (_cpu_s(pid) - cpu0) * 1e6 / result.requests
    if result.errors:
        print(f"    ({result.errors} errors, first: {result.first_error})")
    return result


def ort_inprocess(model: Path, batch: int, seconds: float) -> float:
    """Rows/s of one ONNX Runtime session called in a loop (default session options)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(0).random((batch, 3, 224, 224), dtype=np.float32)
    for _ in range(3):
        sess.run(None, {name: x})
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, {name: x})
        n += batch
    return n / (time.perf_counter() - t0)


def ov_inprocess(model: Path, batch: int, seconds: float) -> float:
    """Rows/s of OpenVINO with the THROUGHPUT hint and an AsyncInferQueue (its best case)."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(str(model), "CPU", {"PERFORMANCE_HINT": "THROUGHPUT"})
    jobs = compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
    q = ov.AsyncInferQueue(compiled, jobs)
    x = np.random.default_rng(0).random((batch, 3, 224, 224), dtype=np.float32)
    for _ in range(jobs):
        q.start_async({0: x})
    q.wait_all()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        q.start_async({0: x})
        n += batch
    q.wait_all()
    return n / (time.perf_counter() - t0)


def verdict(ok: bool) -> str:
    return "meets target" if ok else "BELOW target"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--only", choices=["squeezenet", "mlp"], help="run one part")
    parser.add_argument("--config", type=Path, metavar="AGENT_TOML",
                        help="agent.toml for the agent under test (e.g. [models.mlp] threads=1)")
    args = parser.parse_args(argv)
    secs = args.seconds
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        work = Path(tmp)
        state, mlp_onnx = build_state(work)
        sock = work / "agent.sock"
        config = ["--config", str(args.config.resolve())] if args.config else []
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state),
                      "--grpc", "127.0.0.1:0", "--uds", str(sock), *config], "edge-agent ready")
        tcp = re.search(r"127\.0\.0\.1:\d+", agent.line).group(0)
        print(f"agent start-to-ready {agent.ready_s:.2f} s (3 models), "
              f"RSS {agent.rss_mb():.0f} MiB")
        try:
            if args.only in (None, "squeezenet"):
                squeeze_part(state, sock, secs, agent.popen.pid)
            if args.only in (None, "mlp"):
                mlp_part(mlp_onnx, sock, tcp, work, secs, agent.popen.pid)
                echo_part(work, secs)
            print(f"agent RSS after the runs {agent.rss_mb():.0f} MiB")
        finally:
            agent.stop()
    return 0


def squeeze_part(state: Path, sock: Path, secs: float, agent_pid: int) -> None:
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    for model, profile, artifact, inproc in (
        ("squeezenet", "onnxruntime", "artifacts/onnxruntime/model.onnx", ort_inprocess),
        ("squeezenet_ov", "openvino", "artifacts/openvino/model.xml", ov_inprocess),
    ):
        path = state / "models" / model / "1" / artifact
        best = {b: inproc(path, b, secs) for b in (1, 8)}
        served = load(f"unix:{sock}", infer_request_bytes(model, {"data_0": x}), 16, secs,
                      pid=agent_pid)
        ratio = served.throughput / max(best.values())
        print(f"squeezenet {profile:11s} in-process batch1 {best[1]:7.1f}/s batch8 "
              f"{best[8]:7.1f}/s | served c=16 uds {served.line()}")
        print(f"    served / best in-process = {ratio:.2f}x (target >= 0.9x: "
              f"{verdict(ratio >= 0.9)})")


def mlp_part(mlp_onnx: Path, sock: Path, tcp: str, work: Path, secs: float,
             agent_pid: int) -> None:
    x = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    payload = infer_request_bytes("mlp", {"input": x})
    naive: dict[int, tuple[LoadResult, LoadResult]] = {}
    for workers in (1, 8):
        naive_sock = work / f"naive{workers}.sock"
        proc = Proc(["-m", "benchmarks.naive_server", str(mlp_onnx), "--model", "mlp",
                     "--workers", str(workers), "--listen", f"unix:{naive_sock}",
                     "--listen", "127.0.0.1:0"], "ready")
        naive_tcp = "127.0.0.1:" + proc.line.strip().rsplit(" ", 1)[-1]
        try:
            naive[workers] = (load(naive_tcp, payload, 1, secs, proc.popen.pid),
                              load(f"unix:{naive_sock}", payload, 16, secs, proc.popen.pid))
        finally:
            proc.stop()
    a1 = load(tcp, payload, 1, secs, agent_pid)
    a16 = load(f"unix:{sock}", payload, 16, secs, agent_pid)
    n1, n16 = naive[1]
    print(f"mlp c=1 tcp   naive (1 worker)       {n1.line()}")
    print(f"mlp c=1 tcp   naive (8 threads+lock) {naive[8][0].line()}")
    print(f"mlp c=1 tcp   agent                  {a1.line()}")
    r1 = a1.p50_ms / n1.p50_ms
    print(f"    agent p50 / naive p50 = {r1:.2f}x (target <= 1.15x: {verdict(r1 <= 1.15)})")
    print(f"mlp c=16 uds  naive (1 worker)       {n16.line()}")
    print(f"mlp c=16 uds  naive (8 threads+lock) {naive[8][1].line()}")
    print(f"mlp c=16 uds  agent                  {a16.line()}")
    r16 = a16.throughput / n16.throughput
    r16t = a16.throughput / naive[8][1].throughput
    print(f"    agent / naive throughput = {r16:.2f}x (target >= 1.7x: {verdict(r16 >= 1.7)}); "
          f"vs the threaded naive {r16t:.2f}x")


def echo_part(work: Path, secs: float) -> None:
    """The ceiling: a bare sync gRPC server answering ModelInfer without any inference."""
    import multiprocessing as mp

    from benchmarks.bench_server_model import _serve_sync

    address = f"unix:{work / 'echo.sock'}"
    proc = mp.get_context("spawn").Process(target=_serve_sync, args=(address, 16), daemon=True)
    proc.start()
    try:
        time.sleep(1.5)
        payload = infer_request_bytes("mlp", {"input": np.zeros((1, 64), np.float32)})
        r = load(address, payload, 16, secs, proc.pid)
        print(f"gRPC ceiling: bare sync echo server  {r.line()}")
    finally:
        proc.terminate()
        proc.join(5)


if __name__ == "__main__":
    raise SystemExit(main())
