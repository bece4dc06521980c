"""Callers that give up (issue 25): bursts of ModelInfer with a 1 ms deadline, and calls
cancelled right after they are sent. The agent must spend no model time on them (a queued
request whose caller left is withdrawn and never run) and keep serving everyone else."""

from __future__ import annotations

import threading

import grpc
import numpy as np

from benchmarks.attacks import Tally, Target, channel
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

BURST = 16


def _request(stub: pb_grpc.GRPCInferenceServiceStub, model: str) -> pb.ModelInferRequest:
    """A valid request of one row (zeros) for ``model``'s inputs, from its metadata."""
    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name=model), timeout=30)
    req = pb.ModelInferRequest(model_name=model)
    for tensor in meta.inputs:
        shape = [1 if d < 0 else d for d in tensor.shape]
        dtype = np.dtype(tensor.datatype.lower().replace("fp", "float"))
        req.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=shape)
        req.raw_input_contents.append(np.zeros(shape, dtype).tobytes())
    return req


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Until ``stop``: a burst of calls with a 1 ms deadline and a burst cancelled at once,
    then wait for every one of them to end (nothing is left open)."""
    with channel(target.grpc) as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        request = _request(stub, target.model)
        while not stop.is_set():
            late = [stub.ModelInfer.future(request, timeout=0.001) for _ in range(BURST)]
            left = [stub.ModelInfer.future(request, timeout=30) for _ in range(BURST)]
            for call in left:
                call.cancel()
            tally.add("sent", 2 * BURST)
            for call in late + left:
                try:
                    call.result()
                    tally.add("answered")
                except grpc.FutureCancelledError:
                    tally.add("cancelled")
                except grpc.RpcError as exc:
                    tally.add(exc.code().name.lower())
