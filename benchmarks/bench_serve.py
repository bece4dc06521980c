"""Serving figures of edge-agent, as ratios measured in one run on this machine.

    python -m benchmarks.bench_serve                 # ~3 minutes
    python -m benchmarks.bench_serve --only mlp --rounds 3 --config agent.toml

Starts the agent as a subprocess (``edge-agent serve``) on bundles built from the MLP and the
light squeezenet (dynamic batch) and drives it with benchmarks.loadgen (one asyncio process,
request serialized once, identity serializers). Figures, each next to its reference:
  * squeezenet (ORT and OpenVINO profiles), c=16 over the Unix socket vs the best in-process
    runtime throughput at batch 1 and 8 (target >= 0.9x);
  * MLP c=1 over TCP: p50 latency vs the naive one-at-a-time server (target <= 1.15x);
  * MLP c=16 over the Unix socket: throughput vs the naive server (target >= 1.7x);
  * agent start-to-ready time and RSS with the MLP and squeezenet loaded.
The machine is shared, so every comparison is interleaved over ``--rounds`` rounds and the
median of each is used; CPU time per inference (server process, or this process for the
in-process runtimes) is printed too, as it moves much less than wall-clock figures when other
work steals cycles.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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
    state = work / "state"
    return state, install_models(work, [state])


def install_models(work: Path, states: list[Path]) -> Path:
    """Build the mlp (ORT), squeezenet (ORT) and squeezenet_ov (OV) bundles once and install
    them in each of ``states``; returns the MLP's ONNX file."""
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles
    from tests.support.model_factory import LIGHT_BUILD, light_model_path, make_mlp

    mlp = make_mlp(work / "mlp.onnx", seed=1)
    squeeze = light_model_path("squeezenet")
    out = work / "bundles"
    bundles = build_bundles(mlp, name="mlp", version=1, profiles=[ORT], out_dir=out)
    bundles += build_bundles(squeeze, name="squeezenet", version=1, profiles=[ORT],
                             out_dir=out, dynamic_batch=True, **LIGHT_BUILD)
    bundles += build_bundles(squeeze, name="squeezenet_ov", version=1, profiles=[OV],
                             out_dir=out, dynamic_batch=True, **LIGHT_BUILD)
    for state in states:
        for b in bundles:
            if agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned", str(b)]):
                raise SystemExit(f"add-bundle {b} failed")
    return mlp


class Proc:
    """A server subprocess that prints one ready line; stopped with SIGTERM. ``nice`` > 0
    starts it at that OS nice value."""

    def __init__(self, args: list[str], ready: str, nice: int = 0) -> None:
        self.t0 = time.perf_counter()
        self.popen = subprocess.Popen([sys.executable, *args], env=ENV, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True,
                                      preexec_fn=(lambda: os.nice(nice)) if nice else None)
        line = self.popen.stdout.readline()
        self.ready_s = time.perf_counter() - self.t0
        if ready not in line:
            self.stop()
            raise SystemExit(f"{args[:3]} did not start: {line!r}")
        self.line = line
        self.pid = self.popen.pid

    def rss_mb(self) -> float:
        """Resident memory of the server and its child processes (runtime processes)."""
        return _tree_sum(self.pid, lambda p: p.memory_info().rss) / 2**20

    def stop(self) -> None:
        stop_process(self.popen)


def stop_process(popen: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    popen.terminate()
    try:
        popen.wait(30)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


def _tree_sum(pid: int, read: Callable[[psutil.Process], float]) -> float:
    """``read`` summed over ``pid`` and its live child processes (runtime processes)."""
    proc = psutil.Process(pid)
    total = 0.0
    for p in (proc, *proc.children(recursive=True)):
        with contextlib.suppress(psutil.Error):  # a child exited between listing and reading
            total += read(p)
    return total


def _cpu_s(pid: int) -> float:
    def cpu(p: psutil.Process) -> float:
        t = p.cpu_times()
        return t.user + t.system

    return _tree_sum(pid, cpu)


def load(target: str, payload: bytes, c: int, seconds: float, pid: int) -> LoadResult:
    """One closed-loop run after a 1 s warm-up, with the server's CPU per request."""
    asyncio.run(run_load(target, payload, concurrency=c, seconds=1.0, warmup=0.0))
    cpu0, client0 = _cpu_s(pid), time.process_time()
    result = asyncio.run(run_load(target, payload, concurrency=c, seconds=seconds, warmup=0.0))
    if result.requests:
        result.cpu_us_per_request = (_cpu_s(pid) - cpu0) * 1e6 / result.requests
        result.client_cpu_us_per_request = (time.process_time() - client0) * 1e6 / result.requests
    if result.errors:
        print(f"    ({result.errors} errors, first: {result.first_error})")
    return result


def median_result(results: list[LoadResult]) -> LoadResult:
    """The run with the median throughput."""
    return sorted(results, key=lambda r: r.throughput)[len(results) // 2]


# -- in-process runtimes: (rows/s, CPU us per row) ---------------------------------------------

def ort_runner(model: Path, batch: int) -> Callable[[float], tuple[float, float]]:
    """ONNX Runtime, one session with default options, called in a loop."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(0).random((batch, 3, 224, 224), dtype=np.float32)
    for _ in range(3):
        sess.run(None, {name: x})

    def run(seconds: float) -> tuple[float, float]:
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < seconds:
            sess.run(None, {name: x})
            n += batch
        return n / (time.perf_counter() - t0), (time.process_time() - c0) * 1e6 / n

    return run


def ort_parallel_runner(model: Path, batch: int,
                        callers: int = 2) -> Callable[[float], tuple[float, float]]:
    """ONNX Runtime, one session with one intra-op thread, ``callers`` threads calling it.

    On a 2-core machine this keeps both cores busy with no intra-op thread hand-offs: the best
    in-process squeezenet throughput measured here (docs/performance.md)."""
    import threading

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(0).random((batch, 3, 224, 224), dtype=np.float32)
    for _ in range(3):
        sess.run(None, {name: x})

    def run(seconds: float) -> tuple[float, float]:
        counts = [0] * callers
        t0, c0 = time.perf_counter(), time.process_time()
        stop = t0 + seconds

        def loop(i: int) -> None:
            while time.perf_counter() < stop:
                sess.run(None, {name: x})
                counts[i] += batch

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        n = sum(counts)
        return n / (time.perf_counter() - t0), (time.process_time() - c0) * 1e6 / n

    return run


def ov_runner(model: Path, batch: int) -> Callable[[float], tuple[float, float]]:
    """OpenVINO, THROUGHPUT hint, an AsyncInferQueue of the optimal size (its best case)."""
    import openvino as ov

    compiled = ov.Core().compile_model(str(model), "CPU", {"PERFORMANCE_HINT": "THROUGHPUT"})
    jobs = compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
    q = ov.AsyncInferQueue(compiled, jobs)
    x = np.random.default_rng(0).random((batch, 3, 224, 224), dtype=np.float32)
    for _ in range(jobs):
        q.start_async({0: x})
    q.wait_all()

    def run(seconds: float) -> tuple[float, float]:
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < seconds:
            q.start_async({0: x})
            n += batch
        q.wait_all()
        return n / (time.perf_counter() - t0), (time.process_time() - c0) * 1e6 / n

    return run


def reference_runners(kind: str, model: Path) -> dict[str, Callable[[float], tuple[float, float]]]:
    """The in-process references of squeezenet for ``kind`` ("ort" or "ov"), by label; the
    served figure is compared with the best of them."""
    if kind == "ort":
        return {"batch1": ort_runner(model, 1), "batch8": ort_runner(model, 8),
                "2 threads x batch1": ort_parallel_runner(model, 1)}
    return {"batch1": ov_runner(model, 1), "batch8": ov_runner(model, 8)}


def verdict(ok: bool) -> str:
    return "meets target" if ok else "BELOW target"


def _echo_process(address: str) -> mp.process.BaseProcess:
    echo = mp.get_context("spawn").Process(target=_echo_server, args=(address,), daemon=True)
    echo.start()
    time.sleep(1.5)
    return echo


def squeeze_part(state: Path, sock: Path, agent: Proc, work: Path, secs: float,
                 rounds: int) -> None:
    """Served c=16 vs the in-process references, and the ceiling any Python gRPC server has
    here: in-process CPU per image over (that + a bare echo server's CPU per request of the
    same payload + the load generator's own CPU per request), both sharing the 2 cores."""
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    echo_address = f"unix:{work / 'echo-squeeze.sock'}"
    echo = _echo_process(echo_address)
    try:
        _squeeze_models(state, sock, agent, echo_address, echo.pid, x, secs, rounds)
    finally:
        echo.terminate()
        echo.join(5)


def _squeeze_models(state: Path, sock: Path, agent: Proc, echo_address: str, echo_pid: int,
                    x: np.ndarray, secs: float, rounds: int) -> None:
    for model, profile, kind, artifact in (
        ("squeezenet", "onnxruntime", "ort", "artifacts/onnxruntime/model.onnx"),
        ("squeezenet_ov", "openvino", "ov", "artifacts/openvino/model.xml"),
    ):
        runners = reference_runners(kind, state / "models" / model / "1" / artifact)
        payload = infer_request_bytes(model, {"data_0": x})
        inproc: dict[str, list[tuple[float, float]]] = {label: [] for label in runners}
        served: list[LoadResult] = []
        echoed: list[LoadResult] = []
        for _ in range(rounds):  # interleaved, so load from elsewhere hits all alike
            for label, run in runners.items():
                inproc[label].append(run(secs))
            served.append(load(f"unix:{sock}", payload, 16, secs, agent.pid))
            echoed.append(load(echo_address, payload, 16, secs, echo_pid))
        del runners
        med = {label: sorted(v)[len(v) // 2] for label, v in inproc.items()}
        best = max(med, key=lambda label: med[label][0])
        s = median_result(served)
        ratio = s.throughput / med[best][0]
        cpu_ratio = med[best][1] / s.cpu_us_per_request
        print(f"squeezenet {profile}: in-process " + ", ".join(
            f"{label} {t:.1f}/s ({c:.0f} us CPU/img)" for label, (t, c) in med.items()))
        print(f"    served c=16 uds {s.line()}")
        per_round = sorted(r.throughput / max(v[i][0] for v in inproc.values())
                           for i, r in enumerate(served))
        print(f"    served / best in-process ({best}) throughput = {ratio:.2f}x (target >= 0.9x: "
              f"{verdict(ratio >= 0.9)}); CPU efficiency in-process/served = {cpu_ratio:.2f}")
        print(f"    per round, served / that round's best in-process: "
              f"{', '.join(f'{x:.2f}' for x in per_round)} (median {per_round[rounds // 2]:.2f}x)")
        e = median_result(echoed)
        grpc_us = e.cpu_us_per_request + (s.client_cpu_us_per_request or 0.0)
        ceiling = med[best][1] / (med[best][1] + grpc_us)
        print(f"    ceiling of a Python gRPC server here: a bare echo of this request costs "
              f"{e.cpu_us_per_request:.0f} us server CPU + {s.client_cpu_us_per_request:.0f} us "
              f"client CPU, so at most {ceiling:.2f}x of the best in-process with both cores "
              f"busy")


def _echo_server(address: str) -> None:
    from benchmarks.bench_server_model import _serve_sync

    _serve_sync(address, 16)


def mlp_part(mlp_onnx: Path, sock: Path, tcp: str, agent: Proc, work: Path, secs: float,
             rounds: int) -> None:
    x = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    payload = infer_request_bytes("mlp", {"input": x})
    servers: dict[str, tuple[str, str, int]] = {"agent": (tcp, f"unix:{sock}", agent.pid)}
    procs: list[Proc] = []
    echo = mp.get_context("spawn").Process(target=_echo_server,
                                           args=(f"unix:{work / 'echo.sock'}",), daemon=True)
    try:
        for label, workers in (("naive (1 worker)", 1), ("naive (8 threads+lock)", 8)):
            naive_sock = work / f"naive{workers}.sock"
            proc = Proc(["-m", "benchmarks.naive_server", str(mlp_onnx), "--model", "mlp",
                         "--workers", str(workers), "--listen", f"unix:{naive_sock}",
                         "--listen", "127.0.0.1:0"], "ready")
            procs.append(proc)
            naive_tcp = "127.0.0.1:" + proc.line.strip().rsplit(" ", 1)[-1]
            servers[label] = (naive_tcp, f"unix:{naive_sock}", proc.pid)
        echo.start()
        time.sleep(1.5)
        results: dict[tuple[str, int], list[LoadResult]] = {}
        for _ in range(rounds):
            for label, (tcp_t, uds_t, pid) in servers.items():
                results.setdefault((label, 1), []).append(load(tcp_t, payload, 1, secs, pid))
                results.setdefault((label, 16), []).append(load(uds_t, payload, 16, secs, pid))
            results.setdefault(("echo", 16), []).append(
                load(f"unix:{work / 'echo.sock'}", payload, 16, secs, echo.pid))
    finally:
        for proc in procs:
            proc.stop()
        echo.terminate()
        echo.join(5)
    med = {k: median_result(v) for k, v in results.items()}
    for label in servers:
        print(f"mlp c=1 tcp   {label:22s} {med[(label, 1)].line()}")
    r1 = med[("agent", 1)].p50_ms / med[("naive (1 worker)", 1)].p50_ms
    print(f"    agent p50 / naive p50 = {r1:.2f}x (target <= 1.15x: {verdict(r1 <= 1.15)})")
    for label in servers:
        print(f"mlp c=16 uds  {label:22s} {med[(label, 16)].line()}")
    print(f"mlp c=16 uds  {'bare gRPC echo (ceiling)':22s} {med[('echo', 16)].line()}")
    agent16 = med[("agent", 16)].throughput
    r16 = agent16 / med[("naive (1 worker)", 16)].throughput
    r16t = agent16 / med[("naive (8 threads+lock)", 16)].throughput
    print(f"    agent / naive throughput = {r16:.2f}x (target >= 1.7x: {verdict(r16 >= 1.7)}); "
          f"vs the threaded naive {r16t:.2f}x")
    ceiling = med[("echo", 16)].throughput / med[("naive (1 worker)", 16)].throughput
    print(f"    bare echo / naive throughput = {ceiling:.2f}x: the most any server on this Python "
          f"gRPC stack reaches here (agent reaches {agent16 / med[('echo', 16)].throughput:.2f}x "
          f"of the echo)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--only", choices=["squeezenet", "mlp"], help="run one part")
    parser.add_argument("--config", type=Path, metavar="AGENT_TOML",
                        help="agent.toml for the agent under test (e.g. [models.mlp] threads=1)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        work = Path(tmp)
        state, mlp_onnx = build_state(work)
        sock = work / "agent.sock"
        config = ["--config", str(args.config.resolve())] if args.config else []
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state),
                      "--grpc", "127.0.0.1:0", "--uds", str(sock), *config], "edge-agent ready")
        tcp = re.search(r"127\.0\.0\.1:\d+", agent.line).group(0)
        print(f"agent start-to-ready {agent.ready_s:.2f} s (mlp, squeezenet on ORT and on "
              f"OpenVINO), RSS {agent.rss_mb():.0f} MiB; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        try:
            if args.only in (None, "squeezenet"):
                squeeze_part(state, sock, agent, work, args.seconds, args.rounds)
            if args.only in (None, "mlp"):
                mlp_part(mlp_onnx, sock, tcp, agent, work, args.seconds, args.rounds)
            print(f"agent RSS after the runs {agent.rss_mb():.0f} MiB; load average "
                  f"{os.getloadavg()[0]:.1f}")
        finally:
            agent.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
