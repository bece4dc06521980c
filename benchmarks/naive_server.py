"""The naive baseline: a hand-rolled KServe ModelInfer server, one request at a time.

One ONNX Runtime session, no batching: what people write with Flask today (one sync worker),
but speaking the same gRPC ModelInfer as the agent so one load generator drives both.
``--workers N`` gives the threaded variant (N handler threads, a lock around the session),
which parses requests in parallel and only serializes inference.

    python -m benchmarks.naive_server model.onnx --model mlp --listen unix:/tmp/naive.sock
"""

from __future__ import annotations

import argparse
import signal
import threading
from concurrent import futures

import grpc
import numpy as np
import onnxruntime as ort

from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

_DTYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32,
           "UINT8": np.uint8}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


class NaiveServicer(pb_grpc.GRPCInferenceServiceServicer):
    """ModelInfer only: decode raw inputs, run the session under a lock, encode raw outputs."""

    def __init__(self, onnx_path: str, model: str) -> None:
        self.session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        self.model = model
        self.lock = threading.Lock()

    def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    def ModelInfer(self, request, context):
        feeds = {
            t.name: np.frombuffer(raw, dtype=_DTYPES[t.datatype]).reshape(tuple(t.shape))
            for t, raw in zip(request.inputs, request.raw_input_contents, strict=True)
        }
        with self.lock:
            outputs = self.session.run(None, feeds)
        response = pb.ModelInferResponse(model_name=self.model, model_version="1", id=request.id)
        for meta, array in zip(self.session.get_outputs(), outputs, strict=True):
            response.outputs.add(name=meta.name, datatype=_NAMES[array.dtype], shape=array.shape)
            response.raw_output_contents.append(array.tobytes())
        return response


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("onnx")
    parser.add_argument("--model", required=True)
    parser.add_argument("--listen", action="append", required=True,
                        help="unix:/path or 127.0.0.1:PORT (repeatable)")
    parser.add_argument("--workers", type=int, default=1,
                        help="handler threads (default 1: one request at a time)")
    args = parser.parse_args(argv)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(NaiveServicer(args.onnx, args.model),
                                                       server)
    bound = [f"{a} -> {server.add_insecure_port(a)}" for a in args.listen]
    server.start()
    print("ready", " ".join(bound), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        stop.wait()
    finally:
        server.stop(1).wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
