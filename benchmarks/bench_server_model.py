"""Which gRPC server model to serve with: grpc.aio vs the sync thread-pool server.

Each serves a ModelInfer that parses the request, views the raw input with numpy and answers
with a 10-float raw output (the agent's per-request protocol work, without inference), over a
Unix socket, driven by benchmarks.loadgen at 1 and 16 in flight.

    python -m benchmarks.bench_server_model
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np

from benchmarks.loadgen import infer_request_bytes, run_load
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


def main() -> int:
    payload = infer_request_bytes("mlp", {"input": np.zeros((1, 64), np.float32)})
    with tempfile.TemporaryDirectory() as tmp:
        for label, target, args in (("sync thread pool", _serve_sync, (16,)),
                                    ("grpc.aio", _serve_aio, ())):
            address = f"unix:{Path(tmp) / label.replace(' ', '_')}.sock"
            proc = mp.get_context("spawn").Process(target=target, args=(address, *args),
                                                   daemon=True)
            proc.start()
            try:
                time.sleep(1.5)
                for c in (1, 16):
                    r = asyncio.run(run_load(address, payload, concurrency=c, seconds=4))
                    print(f"{label:17s} {r.line()}")
            finally:
                proc.terminate()
                proc.join(5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
