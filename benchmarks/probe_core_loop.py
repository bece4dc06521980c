"""A probe, not a server: what one Python thread on grpcio's core completion queue serves.

Serves KServe v2 ``ModelInfer`` (raw FP32 input, one output) for one ONNX model on ONNX Runtime
(one intra-op thread, no spinning: the agent's settings on a small device) from a single
thread that polls grpc core's completion queue itself (``grpc._cython.cygrpc``, grpcio's
internal API): every call is received, run and answered by that thread, with no hand-off to
a handler thread. Messages that are ready together run as one batch (``--no-batch``: one
execution per request). No admission, budgets, deadlines or errors beyond the minimum: it
measures the floor a front end of this shape could reach, beside Triton and the agent
(issue 29, docs/performance.md):

    python -m benchmarks.probe_core_loop --model /tmp/models/mlp.onnx --listen 127.0.0.1:9101

then drive it with the anchor's client (``benchmarks.anchor_cpu --server probe=...:PID``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort
from grpc._cython import cygrpc

from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

_NEW = object()


class _Recv:
    __slots__ = ("call",)

    def __init__(self, call: object) -> None:
        self.call = call


class _Sent:
    __slots__ = ("call",)

    def __init__(self, call: object) -> None:
        self.call = call


def _session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _send(call: object, answer: bytes) -> None:
    call.start_server_batch((  # type: ignore[attr-defined]
        cygrpc.SendInitialMetadataOperation(None, 0),
        cygrpc.SendMessageOperation(answer, 0),
        cygrpc.SendStatusFromServerOperation(None, cygrpc.StatusCode.ok, b"", 0),
        cygrpc.ReceiveCloseOnServerOperation(0),
    ), _Sent(call))


def serve(model: str, listen: str, batch: bool) -> None:
    """Serve until killed."""
    session = _session(model)
    in_name = session.get_inputs()[0].name
    out_name = session.get_outputs()[0].name
    queue = cygrpc.CompletionQueue()
    server = cygrpc.Server((), False)
    server.register_completion_queue(queue)
    server.add_http2_port(listen.encode())
    server.start()
    server.request_call(queue, queue, _NEW)
    pending: list[tuple[object, pb.ModelInferRequest, np.ndarray]] = []
    deadline: float | None = None  # None: block; 0: only what is ready now
    while True:
        event = queue.poll(deadline)
        if event.completion_type == cygrpc.CompletionType.queue_timeout:
            if pending:  # nothing more is ready: run what came in as one batch
                _run(session, in_name, out_name, pending)
                pending = []
            deadline = None
            continue
        tag = event.tag
        if tag is _NEW:
            server.request_call(queue, queue, _NEW)
            if event.success:
                event.call.start_server_batch((cygrpc.ReceiveMessageOperation(0),),
                                              _Recv(event.call))
        elif isinstance(tag, _Recv):
            message = event.batch_operations[0].message() if event.success else None
            if message is not None:
                request = pb.ModelInferRequest.FromString(message)
                shape = tuple(request.inputs[0].shape)
                x = np.frombuffer(request.raw_input_contents[0], np.float32).reshape(shape)
                pending.append((tag.call, request, x))
                if not batch:
                    _run(session, in_name, out_name, pending)
                    pending = []
        deadline = 0.0 if pending else None


def _run(session: ort.InferenceSession, in_name: str, out_name: str,
         pending: list[tuple[object, pb.ModelInferRequest, np.ndarray]]) -> None:
    xs = [x for _, _, x in pending]
    y = session.run([out_name], {in_name: np.concatenate(xs) if len(xs) > 1 else xs[0]})[0]
    row = 0
    for call, request, x in pending:
        part = y[row:row + len(x)]
        row += len(x)
        response = pb.ModelInferResponse(model_name=request.model_name, model_version="1",
                                         id=request.id)
        response.outputs.add(name=out_name, datatype="FP32", shape=part.shape)
        response.raw_output_contents.append(part.tobytes())
        _send(call, response.SerializeToString())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="an ONNX model with one FP32 input")
    parser.add_argument("--listen", required=True, help="e.g. 127.0.0.1:9101 or unix:/tmp/p.sock")
    parser.add_argument("--no-batch", dest="batch", action="store_false",
                        help="one execution per request")
    args = parser.parse_args(argv)
    print(f"probe serving {args.model} on {args.listen} ({time.strftime('%H:%M:%S')})",
          flush=True)
    serve(args.model, args.listen, args.batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
