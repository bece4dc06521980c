"""Checks shared by the reliability and security tests: database integrity, what a version
serves, and a well-behaved caller that must see nothing of other callers' trouble."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import grpc
import numpy as np

from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

X = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
DATABASES = ("state.db", "metrics.db")


def integrity(state_dir: Path) -> dict[str, str]:
    """``PRAGMA integrity_check`` of every database in ``state_dir`` (name -> result)."""
    out = {}
    for name in DATABASES:
        path = state_dir / name
        assert path.exists(), f"{path} is missing"
        con = sqlite3.connect(path)
        try:
            out[name] = con.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            con.close()
    return out


def served_version(address: str, x: np.ndarray = X) -> tuple[str, np.ndarray]:
    """One tritonclient inference of ``mlp``: (model_version, probs)."""
    import tritonclient.grpc as tc

    with tc.InferenceServerClient(address) as triton:
        inp = tc.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = triton.infer("mlp", [inp])
    return result.get_response().model_version, result.as_numpy("probs")


def infer_request(model: str, x: np.ndarray) -> pb.ModelInferRequest:
    """A raw-contents ModelInfer request of ``x`` (FP32) for ``model``'s ``input``."""
    req = pb.ModelInferRequest(model_name=model)
    req.inputs.add(name="input", datatype="FP32", shape=x.shape)
    req.raw_input_contents.append(x.tobytes())
    return req


class Bystander:
    """Calls ``mlp`` without pause on its own channel; every call must succeed, correctly."""

    def __init__(self, address: str, x: np.ndarray = X[:1]) -> None:
        self.address = address
        self.request = infer_request("mlp", x)
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            while not self._stop.is_set():
                try:
                    reply = stub.ModelInfer(self.request, timeout=60)
                    out = np.frombuffer(reply.raw_output_contents[0], np.float32)
                    if reply.model_name != "mlp" or out.shape != (10,) \
                            or not np.isfinite(out).all():
                        self.failures.append(f"bad reply from {reply.model_name}: {out!r}")
                    self.ok += 1
                except grpc.RpcError as exc:
                    self.failures.append(f"{exc.code()}: {exc.details()}")

    def __enter__(self) -> Bystander:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
