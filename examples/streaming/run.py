"""Stream chunks of two signals to a stateful, decoupled model and read its partial results.

    python examples/streaming/run.py [--workdir DIR]

1. ``edge-pack build`` listener.toml (a Python model with ``decoupled = true`` and a
``[sequence]`` table), signed; 2. start a local agent (a subprocess, loopback only, mDNS off)
trusting the key and deploy it; 3. open one gRPC stream with tritonclient's ``start_stream``
and send two sequences' chunks, interleaved, with ``async_stream_infer(sequence_id=...,
sequence_start=..., sequence_end=..., enable_empty_final_response=True)``: every chunk is
answered with a response per frame it completed, then an empty response flagged final;
4. check each sequence's last transcript against the same frames computed offline on the
whole signal. Exits 0 when both match; the agent is always stopped.

Needs ``pip install 'edgeship[all]'`` (packager, agent and tritonclient).
"""

from __future__ import annotations

import queue
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT)]

import listener  # noqa: E402  (this directory)

PROFILE = "x86_64-cpu-onnxruntime"
RATE = 16_000
WAIT_S = 60.0  # for each response; the agent answers in milliseconds


def signal(seed: int) -> np.ndarray:
    """Half a second of bursts of a tone between quiet noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(RATE // 2) / RATE
    bursts = (np.sin(2 * np.pi * (3 + seed) * t) > 0.3).astype(np.float32)
    tone = 0.5 * np.sin(2 * np.pi * 440 * t) * bursts
    return (tone + 0.01 * rng.standard_normal(len(t))).astype(np.float32)


def chunks(audio: np.ndarray, seed: int) -> list[np.ndarray]:
    """``audio`` cut at uneven places (frames straddle chunks; some chunks complete none)."""
    rng = np.random.default_rng(seed)
    cuts = np.cumsum(rng.integers(40, 700, size=len(audio) // 40))
    return [c for c in np.split(audio, cuts[cuts < len(audio)]) if len(c)]


def build(workdir: Path) -> tuple[Path, Path]:
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair

    private, public = generate_keypair(workdir / "keys")
    (bundle,) = build_bundles(HERE / "listener.toml", name="listener", version=1,
                              profiles=[PROFILE], out_dir=workdir / "dist", key_path=private)
    print(f"  built {bundle.name}")
    return bundle, public


def stream(grpc_address: str, sequences: dict[int, list[np.ndarray]]) -> dict[int, str]:
    """Send every sequence's chunks on one stream, interleaved; the last transcript of each."""
    import tritonclient.grpc as grpcclient

    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    last: dict[int, str] = {}
    with grpcclient.InferenceServerClient(grpc_address) as triton:
        triton.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            rounds = max(len(c) for c in sequences.values())
            for i in range(rounds):
                for seq, parts in sequences.items():
                    if i >= len(parts):
                        continue
                    audio = grpcclient.InferInput("AUDIO", [len(parts[i])], "FP32")
                    audio.set_data_from_numpy(parts[i])
                    triton.async_stream_infer(
                        "listener", [audio], request_id=f"{seq}-{i}", sequence_id=seq,
                        sequence_start=i == 0, sequence_end=i == len(parts) - 1,
                        enable_empty_final_response=True)
                    frames = _answers(answers, seq, last)
                    print(f"  sequence {seq} chunk {i:2d} ({len(parts[i]):3d} samples): "
                          f"{frames} frame(s)")
        finally:
            triton.stop_stream()
    return last


def _answers(answers: queue.Queue[tuple[Any, Any]], seq: int, last: dict[int, str]) -> int:
    """Read one request's responses up to its final flag; how many frames it answered."""
    frames = 0
    while True:
        result, error = answers.get(timeout=WAIT_S)
        if error is not None:
            raise RuntimeError(f"sequence {seq}: {error}")
        response = result.get_response()
        if response.outputs:
            last[seq] = result.as_numpy("TEXT")[0].decode()
            frames += 1
        if response.parameters["triton_final_response"].bool_param:
            return frames


def main(argv: list[str] | None = None) -> int:
    from examples.demo import LocalAgent, fresh_workdir

    workdir = fresh_workdir(__doc__ or "", "streaming-out", argv)

    print("1. build the bundle")
    bundle, public = build(workdir)
    print("2. start a local agent and deploy listener")
    agent = LocalAgent(workdir / "agent-state", public)
    agent.start()
    try:
        from edge_agent.client.agent_client import AgentClient, PinnedTls
        from edge_agent.management.tls import fingerprint_of

        pin = PinnedTls(fingerprint_of(agent.state_dir))
        with AgentClient(agent.management, token=agent.token, tls=pin) as client:
            result = client.deploy(bundle)
            print(f"  listener: {'ok' if result.ok else 'FAILED'} {result.message}")
            if not result.ok:
                return 1
        print("3. stream two sequences' chunks on one stream")
        signals = {1001: signal(1), 1002: signal(2)}
        got = stream(agent.grpc, {seq: chunks(a, seq) for seq, a in signals.items()})
        print("4. compare with the frames computed offline")
        ok = True
        for seq, audio in signals.items():
            expected = listener.transcript(listener.frames(audio))
            same = got.get(seq) == expected
            ok = ok and same
            print(f"  sequence {seq}: {got.get(seq, '')}")
            print(f"  sequence {seq}: the same transcript as computed offline: "
                  f"{'yes' if same else 'NO'}")
        return 0 if ok else 1
    finally:
        agent.stop()


if __name__ == "__main__":
    sys.exit(main())
