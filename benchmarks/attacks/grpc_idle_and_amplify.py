"""Issue 19's abusers as a soak attack: idle ModelStreamInfer streams and output amplification.

Eight streams that never send (reopened whenever the agent closes one), and one caller asking
for the output ``probs`` 20,000 times in one request (refused INVALID_ARGUMENT).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import grpc

from benchmarks.attacks import Tally, Target, channel, infer_until

STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
IDLE_STREAMS = 8


def _amplified_request(model: str, copies: int = 20_000) -> bytes:
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

    msg = pb.ModelInferRequest(model_name=model)
    msg.inputs.add(name="input", datatype="FP32", shape=[1, 16])
    msg.raw_input_contents.append(bytes(64))
    for _ in range(copies):
        msg.outputs.add(name="probs")
    return msg.SerializeToString()


def _idle_stream(target: Target, stop: threading.Event, tally: Tally) -> None:
    def silent() -> Iterator[bytes]:
        stop.wait()
        return
        yield b""  # pragma: no cover - makes this a generator

    with channel(target.grpc) as ch:
        call = ch.stream_stream(STREAM)
        while not stop.is_set():
            responses = call(silent())
            tally.add("streams opened")
            with contextlib.suppress(grpc.RpcError):
                for _ in responses:
                    pass
            if not stop.is_set():
                tally.add("streams closed by the agent")
                stop.wait(0.2)
            responses.cancel()


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Hold the idle streams and send amplified requests until ``stop``."""
    holders = [threading.Thread(target=_idle_stream, args=(target, stop, tally), daemon=True)
               for _ in range(IDLE_STREAMS)]
    for t in holders:
        t.start()
    infer_until(target, stop, tally, _amplified_request(target.model), "amplified")
    for t in holders:
        t.join(30)
