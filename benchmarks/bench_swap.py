"""Hot-swap, metrics-cost and footprint figures of edge-agent, as ratios measured in one run.

    python -m benchmarks.bench_swap            # about a minute; --swaps / --seconds to change

Agents run as subprocesses (``edge-agent serve`` on 127.0.0.1, mDNS off); bundles are built
for the device's own profile from the sample MLP (two seeds) and the light squeezenet.
Prints:
  * swap under load (closed loop, concurrency 16, lean grpc.aio client): failed requests over
    all swaps (target 0), p99 latency in the swap windows vs the same-length steady windows
    between them (target <= 3x), time from the deploy call to the first response of the new
    version, and the deploy call's duration;
  * metrics on vs off: throughput ratio of two agents under the same load, interleaved
    rounds (target >= 0.97);
  * agent start to ready with one model (median of 3 starts), and the agent's RSS with
    squeezenet loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "GRPC_ENABLE_FORK_SUPPORT": "0"}
READY = re.compile(r"edge-agent ready: listening on (?P<listen>.*?); management on "
                   r"(?P<mgmt>\S+?);")
INFER = "/inference.GRPCInferenceService/ModelInfer"


class Agent:
    """``edge-agent serve`` as a subprocess; ``start()`` returns seconds to the ready line."""

    def __init__(self, state: Path, public: Path, *extra: str) -> None:
        self.state = state
        self.args = [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir", str(state),
                     "--grpc", "127.0.0.1:0", "--no-uds", "--management", "127.0.0.1:0",
                     "--trust", str(public), "--no-mdns", *extra]
        self.proc: subprocess.Popen[str] | None = None
        self.grpc = self.mgmt = self.http = ""

    def start(self) -> float:
        self.state.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.args, env=ENV, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            match = READY.search(line)
            if match:
                took = time.perf_counter() - t0
                self.grpc = next(t for t in match["listen"].split(", ")
                             if not t.startswith("unix:"))
                self.mgmt = match["mgmt"]
                http = re.search(r"HTTP on (\S+?);", line)
                self.http = http[1] if http else ""
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()
                return took
        raise SystemExit("the agent exited before it was ready")

    @property
    def token(self) -> str:
        return (self.state / "management.token").read_text().strip()

    def client(self):  # type: ignore[no-untyped-def]
        """A management client over TLS, the agent's certificate pinned (as a console does)."""
        from edge_agent.client.agent_client import AgentClient, PinnedTls
        from edge_agent.management.tls import fingerprint_of

        return AgentClient(self.mgmt, token=self.token,
                           tls=PinnedTls(fingerprint_of(self.state)))

    def rss(self) -> int:
        assert self.proc is not None
        return psutil.Process(self.proc.pid).memory_info().rss

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@dataclass
class Sample:
    start: float
    end: float
    ok: bool
    version: str


def request_bytes(x: np.ndarray) -> bytes:
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

    msg = pb.ModelInferRequest(model_name="mlp")
    msg.inputs.add(name="input", datatype="FP32", shape=x.shape)
    msg.raw_input_contents.append(x.tobytes())
    return msg.SerializeToString()


async def closed_loop(target: str, payload: bytes, concurrency: int, stop: threading.Event,
                      samples: list[Sample]) -> None:
    """``concurrency`` callers, each sending the next request when the last one returns."""
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(INFER, request_serializer=None, response_deserializer=None)

        async def caller() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    raw = await call(payload, timeout=30)
                    version = pb.ModelInferResponse.FromString(raw).model_version
                    samples.append(Sample(t0, time.perf_counter(), True, version))
                except grpc.aio.AioRpcError:
                    samples.append(Sample(t0, time.perf_counter(), False, ""))

        await asyncio.gather(*(caller() for _ in range(concurrency)))


class Load:
    """A closed-loop load on a thread of its own (its own event loop)."""

    def __init__(self, target: str, concurrency: int) -> None:
        x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(closed_loop(
            target, request_bytes(x), concurrency, self.stop, self.samples)), daemon=True)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def p99(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 99)) * 1000 if latencies else float("nan")


def build(work: Path) -> tuple[Path, Path, dict[int, Path], Path]:
    from edge_agent.deploy.device import detect_device
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from packager.samples import make_mlp
    from tests.support.model_factory import LIGHT_BUILD, light_model_path

    profile = detect_device().profile
    private, public = generate_keypair(work / "keys")
    mlp = {}
    for v in (1, 2):
        src = make_mlp(work / f"mlp{v}.onnx", seed=v)
        (mlp[v],) = build_bundles(src, name="mlp", version=v, profiles=[profile],
                                  out_dir=work / "b", key_path=private, dynamic_batch=True)
    (squeeze,) = build_bundles(light_model_path("squeezenet"), name="squeezenet", version=1,
                               profiles=[profile], out_dir=work / "b", key_path=private,
                               dynamic_batch=True, **LIGHT_BUILD)
    print(f"bundles built for this device's profile {profile}")
    return private, public, mlp, squeeze


def deploy(agent: Agent, bundle: Path) -> None:
    with agent.client() as c:
        result = c.deploy(bundle)
        if not result.ok:
            raise SystemExit(f"deploy failed: {result.message}")


def bench_swaps(agent: Agent, mlp: dict[int, Path], swaps: int, concurrency: int) -> None:
    windows: list[tuple[float, float]] = []
    steady: list[tuple[float, float]] = []
    to_serving: list[float] = []
    call_s: list[float] = []
    with agent.client() as client, Load(agent.grpc, concurrency) as load:
        time.sleep(1.5)  # warm the clients and the agent
        for i in range(swaps):
            target = 2 if i % 2 == 0 else 1
            t0 = time.perf_counter()
            result = client.deploy(mlp[2]) if target == 2 else client.rollback("mlp")
            t1 = time.perf_counter()
            if not result.ok:
                raise SystemExit(f"swap {i} failed: {result.message}")
            time.sleep(0.5)
            windows.append((t0, t1 + 0.5))
            call_s.append(t1 - t0)
            first = min((s.end for s in load.samples if s.start >= t0 and s.ok
                         and s.version == str(target)), default=None)
            if first is not None:
                to_serving.append(first - t0)
            length = (t1 + 0.5) - t0
            s0 = time.perf_counter()
            time.sleep(length)  # a steady window of the same length
            steady.append((s0, s0 + length))
    samples = load.samples
    failed = sum(1 for s in samples if not s.ok)

    def within(ws: list[tuple[float, float]]) -> list[float]:
        return [s.end - s.start for s in samples if s.ok and any(a <= s.start < b
                                                                for a, b in ws)]

    swap_p99, steady_p99 = p99(within(windows)), p99(within(steady))
    print(f"swap under load, c={concurrency}, {swaps} swaps (deploy v2 / roll back), "
          f"{len(samples)} requests:")
    print(f"  failed requests                       {failed}  (target 0)")
    print(f"  p99 during swaps / steady             {swap_p99:.2f} ms / {steady_p99:.2f} ms = "
          f"{swap_p99 / steady_p99:.2f}x  (target <= 3x)")
    print(f"  deploy call -> new version serving   median "
          f"{statistics.median(to_serving) * 1000:.0f} ms (max "
          f"{max(to_serving) * 1000:.0f} ms); deploy call itself median "
          f"{statistics.median(call_s) * 1000:.0f} ms")


def bench_metrics_cost(work: Path, public: Path, bundle: Path, rounds: int, seconds: float,
                       concurrency: int) -> None:
    on = Agent(work / "metrics-on", public)
    off = Agent(work / "metrics-off", public, "--no-metrics")
    try:
        on.start()
        off.start()
        deploy(on, bundle)
        deploy(off, bundle)
        rates: dict[str, list[float]] = {"on": [], "off": []}
        cpu: dict[str, list[float]] = {"on": [], "off": []}  # server CPU us per request
        for r in range(rounds):
            order = (("on", on), ("off", off)) if r % 2 == 0 else (("off", off), ("on", on))
            for name, agent in order:
                proc = psutil.Process(agent.proc.pid)
                with Load(agent.grpc, concurrency) as load:
                    time.sleep(0.5)
                    n0, t0, c0 = len(load.samples), time.perf_counter(), sum(proc.cpu_times()[:2])
                    time.sleep(seconds)
                    n = len(load.samples) - n0
                    rates[name].append(n / (time.perf_counter() - t0))
                    cpu[name].append((sum(proc.cpu_times()[:2]) - c0) * 1e6 / max(n, 1))
        # each round runs on and off back to back: the ratio within a round cancels most of
        # the machine's drift; the median over rounds drops the outliers
        pairs = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
        ratio = statistics.median(pairs)
        print(f"metrics on vs off, c={concurrency}, {rounds} interleaved rounds of "
              f"{seconds:.0f} s: {statistics.median(rates['on']):.0f} vs "
              f"{statistics.median(rates['off']):.0f} infer/s; median per-round ratio "
              f"{ratio:.3f} (rounds {min(pairs):.2f}-{max(pairs):.2f})  (target >= 0.97)")
        print(f"    server CPU per request: on {statistics.median(cpu['on']):.0f} us, off "
              f"{statistics.median(cpu['off']):.0f} us (medians over the rounds)")
    finally:
        on.stop()
        off.stop()


def bench_footprint(work: Path, public: Path, mlp: Path, squeeze: Path) -> None:
    state = work / "footprint"
    first = Agent(state, public)
    first.start()
    deploy(first, mlp)
    first.stop()
    times = []
    for _ in range(3):
        a = Agent(state, public)
        try:
            times.append(a.start())
        finally:
            a.stop()
    print(f"agent start to ready with one model: median {statistics.median(times):.2f} s "
          f"({', '.join(f'{t:.2f}' for t in times)})")
    sq = Agent(work / "squeeze", public)
    try:
        sq.start()
        before = sq.rss()
        deploy(sq, squeeze)
        time.sleep(0.5)
        print(f"agent RSS with squeezenet loaded: {sq.rss() / 2**20:.0f} MiB "
              f"(idle with no model: {before / 2**20:.0f} MiB)")
    finally:
        sq.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swaps", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6, help="metrics on/off rounds")
    parser.add_argument("--seconds", type=float, default=3.0, help="per metrics round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-swap-") as tmp:
        work = Path(tmp)
        _, public, mlp, squeeze = build(work)
        agent = Agent(work / "swap", public)
        try:
            agent.start()
            deploy(agent, mlp[1])
            bench_swaps(agent, mlp, args.swaps, args.concurrency)
        finally:
            agent.stop()
        bench_metrics_cost(work, public, mlp[1], args.rounds, args.seconds, args.concurrency)
        bench_footprint(work, public, mlp[1], squeeze)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
