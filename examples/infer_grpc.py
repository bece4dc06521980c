"""Call a model on this device with plain grpcio and the agent's generated stubs (Unix socket).

    edge-agent serve --state-dir ./state &          # prints the socket path when ready
    python examples/infer_grpc.py --socket ./state/run/inference.sock --model mlp --shape 1,64

Sends one FP32 tensor of random values as raw contents (the fast path) and prints the outputs.

Needs ``pip install 'edgeship[agent]'`` (grpcio, numpy and the stubs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

DTYPES = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64, "INT64": np.int64,
          "INT32": np.int32, "UINT8": np.uint8, "BOOL": np.bool_}


def infer(stub: pb_grpc.GRPCInferenceServiceStub, model: str, inputs: dict[str, np.ndarray],
          version: str = "") -> tuple[str, dict[str, np.ndarray]]:
    """One ModelInfer call; returns the version that answered and the outputs by name."""
    request = pb.ModelInferRequest(model_name=model, model_version=version)
    for name, array in inputs.items():
        request.inputs.add(name=name, datatype="FP32", shape=array.shape)
        request.raw_input_contents.append(np.ascontiguousarray(array, np.float32).tobytes())
    response = stub.ModelInfer(request, timeout=30)
    outputs = {
        out.name: np.frombuffer(raw, dtype=DTYPES[out.datatype]).reshape(tuple(out.shape))
        for out, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }
    return response.model_version, outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", type=Path, required=True, help="the agent's Unix socket")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--version", default="", help="default: the active version")
    parser.add_argument("--shape", default="1,64", help="input shape incl. batch")
    args = parser.parse_args()
    with grpc.insecure_channel(f"unix:{args.socket}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name=args.model), timeout=30)
        shape = tuple(int(d) for d in args.shape.split(","))
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        version, outputs = infer(stub, args.model, {meta.inputs[0].name: x}, args.version)
    print(f"{args.model} version {version} answered:")
    for name, array in outputs.items():
        print(f"  {name} {list(array.shape)}: {np.array2string(array.ravel()[:8], precision=4)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
