"""Idle inference streams vs legitimate throughput: the ratio, measured in one run.

    python -m benchmarks.bench_idle_streams                # 200 idle streams, 8 s per phase
    python -m benchmarks.bench_idle_streams --streams 200 --seconds 5

An ``edge-agent serve`` subprocess (127.0.0.1, mDNS off) serves the sample MLP with the stream
caps raised and the stream timeouts lengthened (so all the idle streams are really held, the
hardest case for the server). A closed-loop load (benchmarks.loadgen, c=8) measures ModelInfer
throughput without idle streams, then while another process holds ``--streams``
ModelStreamInfer calls that never send, then without again. Reports the ratio of the middle
phase to the mean of the other two (target >= 0.9).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path

import grpc
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
AGENT_TOML = """[grpc]
max_streams = {n}
max_streams_per_peer = {n}
stream_first_message_s = 3600
stream_idle_s = 3600
"""


def hold_idle_streams(target: str, n: int, conn: Connection) -> None:
    """Open ``n`` streams that send nothing; report how many are open, hold until told."""

    async def run() -> None:
        async with grpc.aio.insecure_channel(target) as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            call = channel.stream_stream(STREAM, request_serializer=None,
                                         response_deserializer=None)
            release = asyncio.Event()

            async def silent():  # type: ignore[no-untyped-def]
                await release.wait()
                if False:  # pragma: no cover - an async generator that yields nothing
                    yield b""

            calls = [call(silent()) for _ in range(n)]
            for c in calls:
                await c.wait_for_connection()
            await asyncio.sleep(1.0)  # refusals (if any) arrive at once
            loop = asyncio.get_running_loop()
            conn.send(sum(not c.done() for c in calls))
            await loop.run_in_executor(None, conn.recv)  # until the parent says stop
            conn.send(sum(not c.done() for c in calls))
            release.set()
            for c in calls:
                c.cancel()

    asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200, help="idle streams (200)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per phase (8)")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop callers (8)")
    args = parser.parse_args()

    from benchmarks.bench_swap import Agent
    from benchmarks.loadgen import infer_request_bytes, run_load
    from edge_agent.client.agent_client import AgentClient
    from edge_agent.deploy.device import detect_device
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from packager.samples import make_mlp

    with tempfile.TemporaryDirectory(prefix="edge-idle-streams-") as tmp:
        work = Path(tmp)
        private, public = generate_keypair(work / "keys")
        src = make_mlp(work / "mlp.onnx", seed=1)
        (bundle,) = build_bundles(src, name="mlp", version=1,
                                  profiles=[detect_device().profile], out_dir=work / "b",
                                  key_path=private, dynamic_batch=True)
        config = work / "agent.toml"
        config.write_text(AGENT_TOML.format(n=max(args.streams, 1)))
        agent = Agent(work / "state", public, "--config", str(config))
        agent.start()
        try:
            with AgentClient(agent.mgmt, token=agent.token) as client:
                if not client.deploy(bundle).ok:
                    raise SystemExit("the deploy failed")
            payload = infer_request_bytes(
                "mlp", {"input": np.random.default_rng(0).random((1, 64), dtype=np.float32)})

            def load() -> float:
                r = asyncio.run(run_load(agent.grpc, payload, concurrency=args.concurrency,
                                         seconds=args.seconds))
                if r.errors:
                    raise SystemExit(f"legitimate calls failed: {r.errors} ({r.first_error})")
                print(f"  {r.line()}", flush=True)
                return r.throughput

            print(f"without idle streams (c={args.concurrency}):")
            before = load()
            parent, child = mp.get_context("spawn").Pipe()
            holder = mp.get_context("spawn").Process(
                target=hold_idle_streams, args=(agent.grpc, args.streams, child), daemon=True)
            holder.start()
            try:
                held = parent.recv()
                print(f"with {held} of {args.streams} idle streams held:")
                during = load()
                parent.send("stop")
                still = parent.recv()
            finally:
                holder.join(30)
                if holder.is_alive():
                    holder.kill()
            print("without idle streams again:")
            after = load()
        finally:
            agent.stop()
    ratio = during / ((before + after) / 2)
    print(f"idle streams held at the start / end of the loaded phase: {held} / {still}")
    print(f"throughput ratio with {args.streams} idle streams: {ratio:.2f} (target >= 0.9)")
    return 0 if ratio >= 0.9 and held == args.streams else 1


if __name__ == "__main__":
    raise SystemExit(main())
