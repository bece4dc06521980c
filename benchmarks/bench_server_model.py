"""Which gRPC server model to serve with: grpc.aio vs the sync thread-pool server.

Each serves a ModelInfer that parses the request, views the raw input with numpy and answers
with a 10-float raw output (the agent's per-request protocol work, without inference), over a
Unix socket, driven by benchmarks.loadgen at 1 and 16 in flight.

    python -m benchmarks.bench_server_model --rounds 3 --seconds 4

Both servers are up at once and the rounds interleave them; each line shows the server
process's CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import tempfile
import time
from concurrent import futures
from contextlib import ExitStack
from pathlib import Path

import grpc
import numpy as np

from benchmarks.bench_serve import load, median_result
from benchmarks.loadgen import LoadResult, infer_request_bytes
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

_OUT = np.zeros((1, 10), np.float32).tobytes()


def _answer(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    x = np.frombuffer(request.raw_input_contents[0], np.float32)
    response = pb.ModelInferResponse(model_name=request.model_name, model_version="1")
    response.outputs.add(name="probs", datatype="FP32", shape=[1, 10])
    response.raw_output_contents.append(_OUT if x.size else b"")
    return response


class SyncEcho(pb_grpc.GRPCInferenceServiceServicer):
    def ModelInfer(self, request, context):
        return _answer(request)


class AioEcho(pb_grpc.GRPCInferenceServiceServicer):
    async def ModelInfer(self, request, context):
        return _answer(request)


def _serve_sync(address: str, workers: int) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(SyncEcho(), server)
    server.add_insecure_port(address)
    server.start()
    server.wait_for_termination()


def _serve_aio(address: str) -> None:
    async def serve() -> None:
        server = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(AioEcho(), server)
        server.add_insecure_port(address)
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


def _serve_cq(address: str) -> None:
    """One thread on grpc core's completion queue: each call is received, answered and closed
    by the polling thread itself, no hand-off to a handler thread (a probe of what grpcio's own
    sync server costs on top of its core; ``grpc._cython.cygrpc`` is grpcio's internal API)."""
    from grpc._cython import cygrpc

    queue = cygrpc.CompletionQueue()
    server = cygrpc.Server((), False)
    server.register_completion_queue(queue)
    server.add_http2_port(address.encode())
    server.start()
    new_call = object()
    server.request_call(queue, queue, new_call)
    while True:
        event = queue.poll()
        tag = event.tag
        if tag is new_call:
            server.request_call(queue, queue, new_call)
            if event.success:
                call = event.call
                call.start_server_batch((cygrpc.ReceiveMessageOperation(0),), ("recv", call))
        elif isinstance(tag, tuple) and tag[0] == "recv":
            call = tag[1]
            message = event.batch_operations[0].message() if event.success else None
            if message is None:
                continue
            answer = _answer(pb.ModelInferRequest.FromString(message)).SerializeToString()
            call.start_server_batch((
                cygrpc.SendInitialMetadataOperation(None, 0),
                cygrpc.SendMessageOperation(answer, 0),
                cygrpc.SendStatusFromServerOperation(None, cygrpc.StatusCode.ok, b"", 0),
                cygrpc.ReceiveCloseOnServerOperation(0),
            ), ("sent", call))


def _wait_ready(address: str, proc: mp.process.BaseProcess) -> None:
    """Until the server at ``address`` accepts a channel (its process must stay alive)."""
    deadline = time.monotonic() + 60
    while proc.is_alive() and time.monotonic() < deadline:
        with grpc.insecure_channel(address) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=2)
                return
            except grpc.FutureTimeoutError:
                continue
    raise SystemExit(f"the server at {address} did not come up")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    args = parser.parse_args(argv)
    payload = infer_request_bytes("mlp", {"input": np.zeros((1, 64), np.float32)})
    servers = (("sync thread pool", _serve_sync, (16,)), ("grpc.aio", _serve_aio, ()),
               ("core queue loop", _serve_cq, ()))
    results: dict[tuple[str, int], list[LoadResult]] = {}
    print(f"grpcio {grpc.__version__}; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        running = []
        for label, target, extra in servers:
            address = f"unix:{Path(tmp) / label.replace(' ', '_')}.sock"
            proc = mp.get_context("spawn").Process(target=target, args=(address, *extra),
                                                   daemon=True)
            proc.start()
            stack.callback(proc.join, 5)
            stack.callback(proc.terminate)
            _wait_ready(address, proc)
            running.append((label, address, proc))
        for _ in range(args.rounds):  # interleaved: the same machine load for both servers
            for c in (1, 16):
                for label, address, proc in running:
                    assert proc.pid is not None
                    r = load(address, payload, c, args.seconds, proc.pid)
                    results.setdefault((label, c), []).append(r)
                    print(f"  {label:17s} {r.line()}")
    print(f"medians of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f} at the end")
    for (label, _c), runs in results.items():
        print(f"{label:17s} {median_result(runs).line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
