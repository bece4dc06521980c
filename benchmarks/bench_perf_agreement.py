"""Does ``edge-agent perf`` measure the server, not itself? Its figures against perf_analyzer's.

    python -m benchmarks.bench_perf_agreement                 # MLP, c=1,2,4, 3 rounds
    python -m benchmarks.bench_perf_agreement --models mlp,squeezenet --rounds 5 --seconds 3

One agent (``edge-agent serve`` on 127.0.0.1, mDNS off) serves the sample MLP (and the light
squeezenet with ``--models``). Per round, per model and concurrency level, the tools run back
to back in alternating order on the same agent: Triton's ``perf_analyzer`` (tritonclient
2.41's binary, :mod:`edge_agent.perf_analyzer`; 3 windows of ``--seconds``/3 whatever their
spread, its report being their average), ``edge-agent perf`` as a command (``--json``, a
window of ``--seconds``) and, with ``--engines``, the other client paths measured for the
choice of edge-agent perf's: ``aio`` (one ``grpc.aio`` channel in one process, edge-agent
perf's loop before its worker processes, still the benchmarks' loadgen), ``grpcio`` (grpcio's
synchronous calls, a thread and a channel per call in flight, in one process) and
``one-process`` (edge-agent perf's HTTP/2 calls, every call a thread of ONE process).
Prints each run, then per model and level the medians over the rounds of throughput and p50,
the ratio to perf_analyzer within each round (median, and the range), and both tools'
server-side request latency from ModelStatistics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from benchmarks.bench_swap import ENV, Agent, deploy
from edge_agent.perf.inputs import describe_model, make_inputs, request_bytes
from edge_agent.perf.load import Measurement, closed_loop, measure
from edge_agent.perf.server_stats import stats_reader
from edge_agent.perf.workers import INFER_METHOD, WorkerPool
from edge_agent.perf_analyzer import PerfAnalyzer, locate

ROOT = Path(__file__).resolve().parents[1]
Figures = tuple[float, float, float]  # throughput (infer/s), p50 (µs), server µs/request


def build(work: Path, models: list[str]) -> tuple[Path, list[Path]]:
    """Signed bundles for this device's profile; returns the public key and the bundles."""
    from edge_agent.deploy.device import detect_device
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from packager.samples import make_mlp
    from tests.support.model_factory import LIGHT_BUILD, light_model_path

    profile = detect_device().profile
    private, public = generate_keypair(work / "keys")
    bundles = []
    if "mlp" in models:
        bundles += build_bundles(make_mlp(work / "mlp.onnx", seed=1), name="mlp", version=1,
                                 profiles=[profile], out_dir=work / "b", key_path=private,
                                 dynamic_batch=True)
    if "squeezenet" in models:
        bundles += build_bundles(light_model_path("squeezenet"), name="squeezenet", version=1,
                                 profiles=[profile], out_dir=work / "b", key_path=private,
                                 dynamic_batch=True, **LIGHT_BUILD)
    print(f"bundles built for this device's profile {profile}: {', '.join(models)}")
    return public, bundles


def run_perf_analyzer(pa: PerfAnalyzer, target: str, model: str, c: int,
                      seconds: float) -> Figures:
    out = pa.run("-m", model, "-u", target, "-i", "grpc", "--concurrency-range", str(c),
                 "-p", str(max(100, round(seconds * 1000 / 3))), "--stability-percentage",
                 "10000", "--max-trials", "3", timeout=600)
    text = out.stdout + out.stderr
    tput = re.search(r"Throughput: ([\d.]+) infer/sec", text)
    p50 = re.search(r"p50 latency: (\d+) usec", text)
    server = re.search(r"Avg request latency: (\d+) usec", text)
    if out.returncode != 0 or not (tput and p50 and server):
        raise SystemExit(f"perf_analyzer failed (exit {out.returncode}):\n{text}")
    return float(tput[1]), float(p50[1]), float(server[1])


def run_edge_agent_perf(target: str, model: str, c: int, seconds: float) -> Figures:
    out = subprocess.run([sys.executable, "-m", "edge_agent.cli", "perf", "-m", model, "-u",
                          target, "--concurrency-range", str(c), "-p",
                          str(round(seconds * 1000)), "--json"], env=ENV, cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise SystemExit(f"edge-agent perf failed (exit {out.returncode}):\n{out.stderr}")
    (level,) = json.loads(out.stdout)
    return level["throughput"], level["p50_us"], level["server"]["request_us"]


def in_process(engine: str, target: str, model: str, payload: bytes, c: int,
               seconds: float) -> Figures:
    """The client paths edge-agent perf did not keep, measured the same way."""
    stats = stats_reader(target, model)
    before = stats()
    if engine in ("aio", "grpcio"):
        m = (asyncio.run(closed_loop(target, [payload], concurrency=c, seconds=seconds,
                                     warmup_s=min(1.0, seconds / 4))) if engine == "aio" else
             grpcio_threads(target, payload, concurrency=c, seconds=seconds,
                            warmup_s=min(1.0, seconds / 4)))
        server = (stats() - before).per_request_us("success")  # warm-up included
    else:  # one-process: edge-agent perf's workers, one process for every call
        with WorkerPool(target, max_processes=1) as pool:
            m = measure(target, [payload], concurrency=c, seconds=seconds,
                        warmup_s=min(1.0, seconds / 4), pool=pool, stats=stats)
        assert m.server is not None
        server = m.server.per_request_us("success")
    return m.throughput, m.percentile_us(50), server


def grpcio_threads(target: str, payload: bytes, *, concurrency: int, seconds: float,
                   warmup_s: float) -> Measurement:
    """grpcio's synchronous calls of the serialized request, one thread and channel each."""
    latencies: list[float] = []
    start = time.perf_counter() + warmup_s
    stop = start + seconds

    def caller() -> None:
        with grpc.insecure_channel(target) as channel:
            call = channel.unary_unary(INFER_METHOD, request_serializer=None,
                                       response_deserializer=None)
            while (t0 := time.perf_counter()) < stop:
                call(payload, timeout=300)
                if t0 >= start:
                    latencies.append((time.perf_counter() - t0) * 1e6)

    threads = [threading.Thread(target=caller) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Measurement(concurrency, 1, time.perf_counter() - start, tuple(sorted(latencies)))


def client_cpu(target: str, payload: bytes, pa: PerfAnalyzer, model: str,
               calls: int = 1000) -> None:
    """CPU of this process per call at one call in flight (every thread of it: grpcio's
    included), for each client path: the figure that decides what a measurement costs;
    perf_analyzer's estimated from its process's CPU over ~calls at its throughput."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    tput, _, _ = run_perf_analyzer(pa, target, model, 1, 3.0)
    r1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - t0
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    print(f"client CPU per call, {'perf_analyzer (approx.)':<25} {cpu / (tput * wall) * 1e6:5.0f}"
          f" us (its whole run's CPU over throughput x run time)", flush=True)
    from edge_agent.perf.h2unary import H2Unary

    h2 = H2Unary(target, INFER_METHOD)
    with grpc.insecure_channel(target) as channel:
        sync = channel.unary_unary(INFER_METHOD, request_serializer=None,
                                   response_deserializer=None)
        paths: dict[str, Callable[[], object]] = {
            "edge-agent perf (HTTP/2)": lambda: h2(payload),
            "grpcio sync": lambda: sync(payload, timeout=300)}
        for name, call in paths.items():
            for _ in range(100):
                call()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(calls):
                call()
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            print(f"client CPU per call, {name:<25} {cpu / calls * 1e6:5.0f} us "
                  f"(wall {wall / calls * 1e6:5.0f} us)", flush=True)
    h2.close()

    async def aio() -> float:
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.unary_unary(INFER_METHOD, request_serializer=None,
                                       response_deserializer=None)
            for _ in range(100):
                await call(payload)
            c0 = time.process_time()
            for _ in range(calls):
                await call(payload)
            return time.process_time() - c0

    print(f"client CPU per call, {'grpc.aio':<25} {asyncio.run(aio()) / calls * 1e6:5.0f} us",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp", help="mlp and/or squeezenet, comma-separated")
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured per run")
    parser.add_argument("--cpu-calls", type=int, default=1000,
                        help="calls per client path for the client CPU figures (0: skip)")
    parser.add_argument("--engines", default="",
                        help="also measure these client paths: aio,grpcio,one-process")
    args = parser.parse_args(argv)
    models = args.models.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    engines = [e for e in args.engines.split(",") if e]
    pa = locate()
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        work = Path(tmp)
        public, bundles = build(work, models)
        agent = Agent(work / "state", public)
        try:
            agent.start()
            for bundle in bundles:
                deploy(agent, bundle)
            for model in models if args.cpu_calls else []:
                print(model)
                client_cpu(agent.grpc, request_bytes(model, make_inputs(
                    describe_model(agent.grpc, model))), pa, model, args.cpu_calls)
            runs = measure_rounds(agent.grpc, pa, models, levels, engines, args)
        finally:
            agent.stop()
    report(runs, models, levels, ["perf_analyzer", "edge-agent perf", *engines])
    return 0


Runs = dict[tuple[str, int, str], list[Figures]]


def measure_rounds(target: str, pa: PerfAnalyzer, models: list[str], levels: list[int],
                   engines: list[str], args: argparse.Namespace) -> Runs:
    runs: Runs = {}
    payloads = {m: request_bytes(m, make_inputs(describe_model(target, m))) for m in models}
    for r in range(args.rounds):
        for model in models:
            for c in levels:
                tools: list[tuple[str, Callable[[], Figures]]] = [
                    ("perf_analyzer",
                     lambda m=model, c=c: run_perf_analyzer(pa, target, m, c, args.seconds)),
                    ("edge-agent perf",
                     lambda m=model, c=c: run_edge_agent_perf(target, m, c, args.seconds))]
                tools += [(e, lambda e=e, m=model, c=c: in_process(
                    e, target, m, payloads[m], c, args.seconds)) for e in engines]
                if (r + c) % 2:  # alternate who goes first
                    tools.reverse()
                for name, run in tools:
                    load = os.getloadavg()[0]
                    figures = runs.setdefault((model, c, name), [])
                    figures.append(run())
                    t, p50, server = figures[-1]
                    print(f"round {r + 1} {model:<10} c={c} {name:<16} {t:8.1f} infer/s  "
                          f"p50 {p50:7.0f} us  server {server:6.0f} us/req  (load {load:.1f})",
                          flush=True)
                time.sleep(0.2)
    return runs


def report(runs: Runs, models: list[str], levels: list[int], tools: list[str]) -> None:
    print("\nmedians over the rounds; ratio = tool / perf_analyzer within a round, median "
          "(range)")
    print("| model | c | tool | infer/s | p50 µs | server µs/req | throughput ratio | "
          "p50 ratio |\n|---|---|---|---|---|---|---|---|")
    for model in models:
        for c in levels:
            base = runs[(model, c, "perf_analyzer")]
            for tool in tools:
                figs = runs[(model, c, tool)]
                med = [statistics.median(f[i] for f in figs) for i in range(3)]
                cells = [f"| {model} | {c} | {tool} | {med[0]:.0f} | {med[1]:.0f} | "
                         f"{med[2]:.0f} |"]
                for i in (0, 1):
                    ratios = [f[i] / b[i] for f, b in zip(figs, base, strict=True) if b[i]]
                    cells.append(f" {statistics.median(ratios):.2f}x ({min(ratios):.2f}-"
                                 f"{max(ratios):.2f}) |" if tool != "perf_analyzer" else " |")
                print("".join(cells))
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    raise SystemExit(main())
