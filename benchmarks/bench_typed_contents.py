"""Memory an agent takes for requests whose tensors are typed contents (issue 27).

    python -m benchmarks.bench_typed_contents                     # every kind, 32 at once
    python -m benchmarks.bench_typed_contents --kind int64 --concurrency 2
    python -m benchmarks.bench_typed_contents --agent-root /work/main   # another checkout

An ``edge-agent serve`` subprocess (127.0.0.1, mDNS off) serves the sample MLP (``input`` FP32
[batch, 16]). For each kind, ``concurrency`` callers send one request each at the same moment:

- ``int64``: 57 MiB of packed ``int64_contents`` zeros (1 byte each), declared INT64;
- ``bytes``: 46 MiB of ``bytes_contents``, 2-byte elements, declared BYTES;
- ``fp32``: a legitimate FP32 request of ``--fp32-rows`` x 16 ``fp32_contents`` values;
- ``raw``: the control, 57 MiB of ``raw_input_contents`` (more rows than the model takes):
  what receiving that many bytes costs whatever their form.

Reported per kind: the agent's RSS before (after warm-up), its peak during the burst (the
kernel's high-water mark, VmHWM, reset before each burst through /proc/PID/clear_refs, so no
sample is missed), the growth, and the answers by status code. The target is a peak within
the baseline plus twice the typed-input budget (``[agent] max_typed_input_mib``, 256 MiB by
default): the bytes the budget admits at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.attacks.typed_contents import bytes_request, int64_request  # noqa: E402

INFER = "/inference.GRPCInferenceService/ModelInfer"
FEATURES = 16
KINDS = ("int64", "bytes", "fp32", "raw")


def _fp32_request(rows: int, raw: bool = False) -> bytes:
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

    msg = pb.ModelInferRequest(model_name="mlp")
    tensor = msg.inputs.add(name="input", datatype="FP32", shape=[rows, FEATURES])
    if raw:
        msg.raw_input_contents.append(bytes(rows * FEATURES * 4))
    else:
        tensor.contents.fp32_contents.extend(np.zeros(rows * FEATURES, np.float32))
    return msg.SerializeToString()


def payload(kind: str, fp32_rows: int) -> bytes:
    """The wire bytes each caller sends for ``kind``."""
    if kind == "int64":
        return int64_request("mlp", "input", 57 << 20, FEATURES)
    if kind == "bytes":
        return bytes_request("mlp", "input", (46 << 20) // 4)
    if kind == "raw":  # the control: as large as int64, but raw (refused for its rows)
        return _fp32_request((57 << 20) // (4 * FEATURES), raw=True)
    return _fp32_request(fp32_rows)


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def _reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def burst(target: str, pid: int, data: bytes, concurrency: int) -> dict[str, object]:
    """``concurrency`` calls of ``data`` at once; the agent's RSS before and at its peak."""
    proc = psutil.Process(pid)
    time.sleep(1.0)
    before = proc.memory_info().rss / 2**20
    exact = _reset_peak(pid)
    sampled = [before]
    done = threading.Event()

    def sample() -> None:  # a fallback where clear_refs is not allowed
        while not done.wait(0.01):
            sampled.append(proc.memory_info().rss / 2**20)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    codes: Counter[str] = Counter()
    lock = threading.Lock()
    go = threading.Barrier(concurrency)
    details: list[str] = []

    def call() -> None:
        with grpc.insecure_channel(target, options=[
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.max_receive_message_length", 64 << 20)]) as channel:
            stub = channel.unary_unary(INFER)
            go.wait()
            try:
                stub(data, timeout=300)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
                with lock:
                    if len(details) < 3 and exc.details() not in details:
                        details.append(exc.details())
            with lock:
                codes[code] += 1

    t0 = time.perf_counter()
    callers = [threading.Thread(target=call) for _ in range(concurrency)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    took = time.perf_counter() - t0
    done.set()
    sampler.join()
    peak = _kib(pid, "VmHWM") / 1024 if exact else max(sampled)
    return {"before": before, "peak": peak, "growth": peak - before, "codes": dict(codes),
            "details": details, "seconds": took, "exact": exact}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=[*KINDS, "all"], default="all")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fp32-rows", type=int, default=1 << 16,
                        help="rows of the legitimate FP32 request (x16 values; default 4 MiB; "
                        "the bundle's max_batch_size is set to it)")
    parser.add_argument("--max-typed-input-mib", type=float, default=None,
                        help="[agent] max_typed_input_mib of the agent (default: its default)")
    parser.add_argument("--agent-root", type=Path, default=ROOT,
                        help="the checkout whose agent runs (to measure another tree)")
    args = parser.parse_args()

    from benchmarks import bench_swap
    from benchmarks.bench_swap import Agent
    from edge_agent.deploy.device import detect_device
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from packager.samples import make_mlp

    bench_swap.ENV["PYTHONPATH"] = str(args.agent_root.resolve())
    kinds = list(KINDS) if args.kind == "all" else [args.kind]
    with tempfile.TemporaryDirectory(prefix="edge-typed-") as tmp:
        work = Path(tmp)
        private, public = generate_keypair(work / "keys")
        src = make_mlp(work / "mlp.onnx", in_features=FEATURES)
        (bundle,) = build_bundles(src, name="mlp", version=1,
                                  profiles=[detect_device().profile], out_dir=work / "b",
                                  key_path=private, dynamic_batch=True,
                                  max_batch=max(32, args.fp32_rows))
        extra: list[str] = []
        if args.max_typed_input_mib is not None:
            config = work / "agent.toml"
            config.write_text(f"[agent]\nmax_typed_input_mib = {args.max_typed_input_mib}\n")
            extra = ["--config", str(config)]
        agent = Agent(work / "state", public, *extra)
        os.chdir(args.agent_root)  # ``python -m`` puts the working directory first
        agent.start()
        try:
            with agent.client() as client:
                result = client.deploy(bundle)
                if not result.ok:
                    raise SystemExit(f"the deploy failed: {result.message}")
            assert agent.proc is not None
            print(f"agent from {args.agent_root}; {args.concurrency} requests at once")
            for kind in kinds:
                data = payload(kind, args.fp32_rows)
                r = burst(agent.grpc, agent.proc.pid, data, args.concurrency)
                print(f"{kind:5s} {len(data) / 2**20:6.1f} MiB each: RSS {r['before']:7.1f} -> "
                      f"peak {r['peak']:7.1f} MiB (+{r['growth']:.0f} MiB"
                      f"{'' if r['exact'] else ', sampled'}) in {r['seconds']:.1f} s; "
                      f"answers {r['codes']}", flush=True)
                for line in r["details"]:  # type: ignore[attr-defined]
                    print(f"      {str(line)[:160]}")
        finally:
            agent.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    raise SystemExit(main())
