"""Fast-path figures of edge-agent (shared memory, response cache), as ratios in one run.

    python -m benchmarks.bench_fastpath               # ~2 minutes
    python -m benchmarks.bench_fastpath --rounds 2 --seconds 3

Starts the agent as a subprocess (``edge-agent serve``) with the light squeezenet (ORT, dynamic
batch) and the MLP twice (``mlp`` uncached, ``mlp_cached`` with ``response_cache = true``), and
drives it closed-loop at 16 in flight (one asyncio process, requests serialized once):
  * squeezenet c=16 over the Unix socket with input and output in system shared memory, vs the
    same with raw bytes in the messages, vs the best in-process ONNX Runtime reference;
  * MLP c=16 over the Unix socket, uncached vs cached with about 90 % repeated inputs (the hit
    rate measured from ModelStatistics is printed).
Every comparison is interleaved over ``--rounds`` rounds; the median of each is used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import numpy as np

from benchmarks.bench_serve import ORT, Proc, _cpu_s, median_result, reference_runners
from benchmarks.loadgen import INFER_METHOD, LoadResult, infer_request_bytes

CONCURRENCY = 16
HOT_INPUTS = 8
AGENT_TOML = """
[response_cache]
size_mib = 16

[models.mlp_cached]
response_cache = true
"""


def build_state(work: Path) -> Path:
    """mlp, mlp_cached (the same MLP) and squeezenet (ORT, dynamic batch) in a state dir."""
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles
    from tests.model_factory import LIGHT_BUILD, light_model_path, make_mlp

    mlp = make_mlp(work / "mlp.onnx", seed=1)
    out = work / "bundles"
    bundles = build_bundles(mlp, name="mlp", version=1, profiles=[ORT], out_dir=out)
    bundles += build_bundles(mlp, name="mlp_cached", version=1, profiles=[ORT], out_dir=out)
    bundles += build_bundles(light_model_path("squeezenet"), name="squeezenet", version=1,
                             profiles=[ORT], out_dir=out, dynamic_batch=True, **LIGHT_BUILD)
    state = work / "state"
    for b in bundles:
        if agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned", str(b)]):
            raise SystemExit(f"add-bundle {b} failed")
    return state


async def run_load_mix(target: str, payloads: list[bytes], *, concurrency: int,
                       seconds: float, warmup: float = 1.0) -> LoadResult:
    """Closed loop like benchmarks.loadgen.run_load, worker ``i`` sending its own payload
    (``payloads[i]``) when there are ``concurrency`` of them, else the next of a shared cycle."""
    options = [("grpc.max_receive_message_length", 256 << 20),
               ("grpc.max_send_message_length", 256 << 20)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        await asyncio.wait_for(channel.channel_ready(), 30)
        call = channel.unary_unary(INFER_METHOD, request_serializer=None,
                                   response_deserializer=None)
        latencies: list[float] = []
        errors = 0
        first_error = ""
        start = time.perf_counter()
        measure_from, stop_at = start + warmup, start + warmup + seconds
        shared = iter(range(1 << 62))
        per_worker = len(payloads) == concurrency

        async def worker(i: int) -> None:
            nonlocal errors, first_error
            while True:
                t0 = time.perf_counter()
                if t0 >= stop_at:
                    return
                payload = payloads[i] if per_worker else payloads[next(shared) % len(payloads)]
                try:
                    await call(payload)
                except grpc.aio.AioRpcError as exc:
                    errors += 1
                    first_error = first_error or f"{exc.code().name}: {exc.details()}"
                    continue
                if t0 >= measure_from:
                    latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - measure_from
    lat = sorted(latencies) or [0.0]
    return LoadResult(concurrency=concurrency, requests=len(latencies), errors=errors,
                      seconds=elapsed, p50_ms=statistics.median(lat) * 1e3,
                      p99_ms=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
                      first_error=first_error)


def load_mix(target: str, payloads: list[bytes], secs: float, pid: int) -> LoadResult:
    """One measured run (its own 1 s warm-up) with the server's CPU per request."""
    cpu0 = _cpu_s(pid)
    result = asyncio.run(run_load_mix(target, payloads, concurrency=CONCURRENCY, seconds=secs))
    if result.requests:
        result.cpu_us_per_request = (_cpu_s(pid) - cpu0) * 1e6 / result.requests
    if result.errors:
        print(f"    ({result.errors} errors, first: {result.first_error})")
    return result


@contextmanager
def shm_regions(target: str, x: np.ndarray, out_bytes: int) -> Iterator[tuple[str, str]]:
    """One input region holding CONCURRENCY copies of ``x`` and one output region with a slot
    per worker, created in /dev/shm and registered with the agent; names of both."""
    from edge_agent.protocol.generated import grpc_service_pb2 as pb
    from edge_agent.protocol.generated import grpc_service_pb2_grpc as pb_grpc

    tag = f"bench_fastpath_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    names = (f"{tag}_in", f"{tag}_out")
    sizes = (CONCURRENCY * x.nbytes, CONCURRENCY * out_bytes)
    for name, size in zip(names, sizes, strict=True):
        with open(f"/dev/shm/{name}", "wb") as f:
            f.truncate(size)
    with open(f"/dev/shm/{names[0]}", "r+b") as f:
        f.write(np.ascontiguousarray(x).tobytes() * CONCURRENCY)
    try:
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            for name, size in zip(names, sizes, strict=True):
                stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
                    name=name, key=f"/{name}", offset=0, byte_size=size))
            yield names
            stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name=""))
    finally:
        for name in names:
            os.unlink(f"/dev/shm/{name}")


def shm_payloads(model: str, input_name: str, x: np.ndarray, output: str, out_bytes: int,
                 regions: tuple[str, str]) -> list[bytes]:
    """One request per worker: its input slot and its output slot."""
    from edge_agent.protocol.generated import grpc_service_pb2 as pb

    payloads = []
    for i in range(CONCURRENCY):
        msg = pb.ModelInferRequest(model_name=model)
        tensor = msg.inputs.add(name=input_name, datatype="FP32", shape=x.shape)
        tensor.parameters["shared_memory_region"].string_param = regions[0]
        tensor.parameters["shared_memory_byte_size"].int64_param = x.nbytes
        tensor.parameters["shared_memory_offset"].int64_param = i * x.nbytes
        out = msg.outputs.add(name=output)
        out.parameters["shared_memory_region"].string_param = regions[1]
        out.parameters["shared_memory_byte_size"].int64_param = out_bytes
        out.parameters["shared_memory_offset"].int64_param = i * out_bytes
        payloads.append(msg.SerializeToString())
    return payloads


def squeeze_part(state: Path, target: str, agent: Proc, secs: float, rounds: int) -> None:
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    out_name, out_bytes = "softmaxout_1", 1000 * 4
    from edge_agent.protocol.generated import grpc_service_pb2 as pb
    from edge_agent.protocol.generated import grpc_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(target) as channel:
        meta = pb_grpc.GRPCInferenceServiceStub(channel).ModelMetadata(
            pb.ModelMetadataRequest(name="squeezenet"))
        out_name = meta.outputs[0].name
        out_bytes = int(np.prod([d for d in meta.outputs[0].shape if d > 0])) * 4
    runners = reference_runners(
        "ort", state / "models" / "squeezenet" / "1" / "artifacts/onnxruntime/model.onnx")
    raw = [infer_request_bytes("squeezenet", {"data_0": x})] * CONCURRENCY
    inproc: dict[str, list[tuple[float, float]]] = {label: [] for label in runners}
    served_raw: list[LoadResult] = []
    served_shm: list[LoadResult] = []
    with shm_regions(target, x, out_bytes) as regions:
        shm = shm_payloads("squeezenet", "data_0", x, out_name, out_bytes, regions)
        for _ in range(rounds):
            for label, run in runners.items():
                inproc[label].append(run(secs))
            served_raw.append(load_mix(target, raw, secs, agent.pid))
            served_shm.append(load_mix(target, shm, secs, agent.pid))
    med = {label: sorted(v)[len(v) // 2] for label, v in inproc.items()}
    best = max(med, key=lambda label: med[label][0])
    r, s = median_result(served_raw), median_result(served_shm)
    print("squeezenet onnxruntime: in-process " + ", ".join(
        f"{label} {t:.1f}/s ({c:.0f} us CPU/img)" for label, (t, c) in med.items()))
    print(f"    c=16 uds raw bytes      {r.line()}")
    print(f"    c=16 uds shared memory  {s.line()}")
    print(f"    shared memory / best in-process ({best}) = {s.throughput / med[best][0]:.2f}x "
          f"(target >= 0.95x); raw bytes / best in-process = "
          f"{r.throughput / med[best][0]:.2f}x; shared memory / raw bytes = "
          f"{s.throughput / r.throughput:.2f}x")


def _cache_counts(target: str, model: str) -> tuple[int, int]:
    from edge_agent.protocol.generated import grpc_service_pb2 as pb
    from edge_agent.protocol.generated import grpc_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(target) as channel:
        stats = pb_grpc.GRPCInferenceServiceStub(channel).ModelStatistics(
            pb.ModelStatisticsRequest(name=model)).model_stats[0].inference_stats
    return stats.cache_hit.count, stats.cache_miss.count


def mlp_part(target: str, agent: Proc, secs: float, rounds: int) -> None:
    """One request in ten carries a fresh input; the other nine cycle over HOT_INPUTS."""
    rng = np.random.default_rng(1)
    hot = [rng.random((1, 64), dtype=np.float32) for _ in range(HOT_INPUTS)]
    fresh = [rng.random((1, 64), dtype=np.float32) for _ in range(20_000)]
    results: dict[str, list[LoadResult]] = {"mlp": [], "mlp_cached": []}
    rates = []
    for _ in range(rounds):
        for model in results:
            sequence = []
            for i in range(10 * 2_000):
                x = fresh[(i // 10) % len(fresh)] if i % 10 == 0 else hot[i % HOT_INPUTS]
                sequence.append(x)
            fresh = fresh[2_000:] + fresh[:2_000]  # the next run's fresh inputs are new
            payloads = [infer_request_bytes(model, {"input": x}) for x in sequence]
            before = _cache_counts(target, model)
            results[model].append(load_mix(target, payloads, secs, agent.pid))
            after = _cache_counts(target, model)
            if model == "mlp_cached":
                hits, misses = after[0] - before[0], after[1] - before[1]
                rates.append(hits / max(1, hits + misses))
    plain, cached = median_result(results["mlp"]), median_result(results["mlp_cached"])
    print(f"mlp c=16 uds  no cache               {plain.line()}")
    print(f"mlp c=16 uds  response cache         {cached.line()}")
    print(f"    cache hit rate {statistics.median(rates):.0%} (of ~90 % repeated inputs); "
          f"cached / uncached throughput = {cached.throughput / plain.throughput:.2f}x, "
          f"p50 {cached.p50_ms / plain.p50_ms:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--only", choices=["squeezenet", "mlp"], help="run one part")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fastpath-") as tmp:
        work = Path(tmp)
        state = build_state(work)
        toml = work / "agent.toml"
        toml.write_text(AGENT_TOML)
        sock = work / "agent.sock"
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state), "--config",
                      str(toml), "--grpc", "off", "--uds", str(sock)], "edge-agent ready")
        target = f"unix:{sock}"
        print(f"agent ready in {agent.ready_s:.2f} s; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores")
        try:
            if args.only in (None, "squeezenet"):
                squeeze_part(state, target, agent, args.seconds, args.rounds)
            if args.only in (None, "mlp"):
                mlp_part(target, agent, args.seconds, args.rounds)
        finally:
            agent.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
