"""A lean closed-loop gRPC load generator: one asyncio process, N calls in flight.

The request is serialized ONCE up front and sent as bytes through ``grpc.aio`` with identity
serializers, and responses stay undecoded bytes, so the client spends almost no CPU per call
(it shares the machine's cores with the server it measures).

    python -m benchmarks.loadgen --target unix:/tmp/agent.sock --model mlp --shape 1,64 -c 16
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass

import numpy as np

from edge_agent.perf.inputs import request_bytes
from edge_agent.perf.load import INFER_METHOD, closed_loop

__all__ = ["INFER_METHOD", "LoadResult", "infer_request_bytes", "run_load"]


@dataclass
class LoadResult:
    """Throughput and latency of one closed-loop run."""

    concurrency: int
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    first_error: str = ""
    cpu_us_per_request: float | None = None  # of the server process, when measured
    client_cpu_us_per_request: float | None = None  # of this load generator, when measured

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        return (f"c={self.concurrency:<3d} {self.throughput:9.1f} infer/s  "
                f"p50 {self.p50_ms:7.3f} ms  p99 {self.p99_ms:7.3f} ms  "
                f"n={self.requests} errors={self.errors}"
                + (f"  server CPU {self.cpu_us_per_request:.0f} us/req"
                   if self.cpu_us_per_request is not None else ""))


def infer_request_bytes(model: str, inputs: dict[str, np.ndarray], version: str = "") -> bytes:
    """A serialized ModelInferRequest carrying ``inputs`` as raw contents (edge-agent perf's)."""
    return request_bytes(model, inputs, version)


async def run_load(target: str, payload: bytes, *, concurrency: int, seconds: float,
                   warmup: float = 1.0, method: str = INFER_METHOD) -> LoadResult:
    """Keep ``concurrency`` calls in flight for ``warmup + seconds``; measure the last part
    (edge-agent perf's closed loop, :func:`edge_agent.perf.load.closed_loop`)."""
    m = await closed_loop(target, [payload], concurrency=concurrency, seconds=seconds,
                          warmup_s=warmup, method=method)
    return LoadResult(concurrency=concurrency, requests=m.requests, errors=m.errors,
                      seconds=m.seconds, p50_ms=m.percentile_us(50) / 1e3,
                      p99_ms=m.percentile_us(99) / 1e3, first_error=m.first_error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="unix:/path or host:port")
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", default="input", help="input tensor name")
    parser.add_argument("--shape", default="1,64", help="input shape, FP32")
    parser.add_argument("-c", "--concurrency", type=int, default=16)
    parser.add_argument("-t", "--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(","))
    data = np.random.default_rng(0).random(shape, dtype=np.float32)
    payload = infer_request_bytes(args.model, {args.input: data})
    result = asyncio.run(run_load(args.target, payload, concurrency=args.concurrency,
                                  seconds=args.seconds))
    print(result.line())
    if result.first_error:
        print("first error:", result.first_error)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
