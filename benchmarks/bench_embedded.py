"""In-process serving (edge_agent.embedded) vs the agent over its Unix socket, MLP at c=1.

    python -m benchmarks.bench_embedded               # ~1 minute
    python -m benchmarks.bench_embedded --seconds 5 --rounds 3

Builds the MLP as an ONNX Runtime bundle and installs it in a state directory, starts
``edge-agent serve`` on it (Unix socket only), and opens the same state directory in this
process with ``embedded.open_state_dir`` (read-only, next to the running agent). One request in
flight each, rounds interleaved, medians: latency of ``rt.infer`` against a lean gRPC client
(benchmarks.loadgen: the request serialized once, the response left undecoded, so the client
side is the cheapest a gRPC app can be).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_serve import ORT, Proc
from benchmarks.loadgen import infer_request_bytes, run_load


def embedded_latency(rt: object, x: np.ndarray, seconds: float) -> tuple[float, float, int]:
    """p50 and p99 (ms) and the count of blocking ``rt.infer`` calls over ``seconds``."""
    infer = rt.infer  # type: ignore[attr-defined]  # an EmbeddedRuntime
    for _ in range(200):  # warm-up
        infer("mlp", {"input": x})
    lat: list[float] = []
    stop = time.perf_counter() + seconds
    while (t0 := time.perf_counter()) < stop:
        infer("mlp", {"input": x})
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return statistics.median(lat) * 1e3, lat[int(len(lat) * 0.99)] * 1e3, len(lat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args(argv)
    from edge_agent import embedded
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles
    from tests.support.model_factory import make_mlp

    x = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    payload = infer_request_bytes("mlp", {"input": x})
    with tempfile.TemporaryDirectory(prefix="bench-embedded-") as tmp:
        work = Path(tmp)
        state, sock = work / "state", work / "agent.sock"
        (bundle,) = build_bundles(make_mlp(work / "mlp.onnx", seed=1), name="mlp", version=1,
                                  profiles=[ORT], out_dir=work / "bundles")
        if agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned", str(bundle)]):
            raise SystemExit("add-bundle failed")
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state), "--uds",
                      str(sock), "--grpc", ""], "ready")
        emb: list[tuple[float, float, int]] = []
        grpc: list[tuple[float, float, int]] = []
        try:
            with embedded.open_state_dir(state, allow_unsigned=True) as rt:
                for _ in range(args.rounds):
                    emb.append(embedded_latency(rt, x, args.seconds))
                    r = asyncio.run(run_load(f"unix:{sock}", payload, concurrency=1,
                                             seconds=args.seconds))
                    grpc.append((r.p50_ms, r.p99_ms, r.requests))
        finally:
            agent.stop()
    e50, e99 = statistics.median(e[0] for e in emb), statistics.median(e[1] for e in emb)
    g50, g99 = statistics.median(g[0] for g in grpc), statistics.median(g[1] for g in grpc)
    print(f"MLP at c=1, {args.rounds} round(s) of {args.seconds:g} s, medians")
    print(f"  embedded (rt.infer)         p50 {e50:7.3f} ms  p99 {e99:7.3f} ms  "
          f"n={sum(e[2] for e in emb)}")
    print(f"  agent over the Unix socket  p50 {g50:7.3f} ms  p99 {g99:7.3f} ms  "
          f"n={sum(g[2] for g in grpc)}")
    print(f"  agent / embedded: p50 {g50 / e50:.1f}x, p99 {g99 / e99:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
