"""Typed contents in, raw_output_contents out (as Triton answers), on a real served agent.

The request has the shape of Triton's example ``grpc_explicit_int_content_client.py``: a
``simple`` model with two INT32 [1, 16] inputs sent in ``contents.int_contents`` and the
outputs read from ``raw_output_contents`` with ``numpy.frombuffer``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge_agent.config import load_config
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from tests.fastpath.conftest import ORT
from tests.support.core_bundles import build, install
from tests.support.harness import running


def _make_simple(path: Path) -> Path:
    """INPUT0, INPUT1 INT32 [batch, 16] -> OUTPUT0 = sum, OUTPUT1 = difference."""
    io = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 16])
          for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "simple", io[:2], io[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def simple_uds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("typed")
    bundle = build(_make_simple(root / "simple.onnx"), root / "out", "simple", 1, profile=ORT)
    state = root / "state"
    install(bundle, state)
    config = load_config(None, state_dir=state, grpc_address="127.0.0.1:0",
                         uds=root / "infer.sock")
    with running(config, name="typed-agent") as agent:
        assert agent.addresses is not None and agent.addresses.uds is not None
        yield agent.addresses.uds


def _typed_request(in0: np.ndarray, in1: np.ndarray, *, stream_id: str = ""
                   ) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple", model_version="", id=stream_id)
    for name, data in (("INPUT0", in0), ("INPUT1", in1)):
        tensor = pb.ModelInferRequest().InferInputTensor(name=name, datatype="INT32",
                                                          shape=[1, 16])
        tensor.contents.int_contents[:] = data.ravel().tolist()
        request.inputs.extend([tensor])
    request.outputs.extend([pb.ModelInferRequest().InferRequestedOutputTensor(name=n)
                            for n in ("OUTPUT0", "OUTPUT1")])
    return request


def _outputs(response: pb.ModelInferResponse) -> tuple[np.ndarray, np.ndarray]:
    assert len(response.raw_output_contents) == 2
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert all(not o.HasField("contents") for o in response.outputs)
    return tuple(np.frombuffer(raw, dtype=np.int32).reshape(1, 16)  # type: ignore[return-value]
                 for raw in response.raw_output_contents)


def test_int_contents_in_raw_output_contents_out(simple_uds: Path) -> None:
    in0 = np.arange(16, dtype=np.int32).reshape(1, 16)
    in1 = np.ones((1, 16), dtype=np.int32) * 3
    with grpc.insecure_channel(f"unix:{simple_uds}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(_typed_request(in0, in1), timeout=60)
    total, diff = _outputs(response)
    np.testing.assert_array_equal(total, in0 + in1)
    np.testing.assert_array_equal(diff, in0 - in1)
    assert response.outputs[0].datatype == "INT32" and list(response.outputs[0].shape) == [1, 16]


def test_streamed_typed_contents_come_back_raw(simple_uds: Path) -> None:
    rng = np.random.default_rng(3)
    sent = {f"r{i}": (rng.integers(-100, 100, (1, 16), dtype=np.int32),
                      rng.integers(-100, 100, (1, 16), dtype=np.int32)) for i in range(4)}
    with grpc.insecure_channel(f"unix:{simple_uds}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        answers = list(stub.ModelStreamInfer(
            iter([_typed_request(a, b, stream_id=k) for k, (a, b) in sent.items()]), timeout=60))
    assert sorted(a.infer_response.id for a in answers) == sorted(sent)
    for answer in answers:
        assert answer.error_message == ""
        a, b = sent[answer.infer_response.id]
        total, diff = _outputs(answer.infer_response)
        np.testing.assert_array_equal(total, a + b)
        np.testing.assert_array_equal(diff, a - b)
