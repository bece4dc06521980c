"""Converters on real protobuf messages (ours and tritonclient's wire bytes)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from edge_agent.core.types import BatchStat, InferResult, ModelStats
from edge_agent.errors import (
    InvalidInputError,
    ModelNotFoundError,
    ModelUnavailableError,
    QueueFullError,
    RequestTimeoutError,
)
from edge_agent.frontends.grpc import converters, status
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb


def _raw_request(**arrays: np.ndarray) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="mlp", model_version="2", id="r1")
    for name, a in arrays.items():
        msg.inputs.add(name=name, datatype={"float32": "FP32", "int64": "INT64"}[str(a.dtype)],
                       shape=a.shape)
        msg.raw_input_contents.append(a.tobytes())
    return msg


def test_raw_request_from_tritonclient_bytes() -> None:
    import tritonclient.grpc as tc
    from tritonclient.grpc import service_pb2

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    inp = tc.InferInput("input", [3, 4], "FP32")
    inp.set_data_from_numpy(x)
    theirs = service_pb2.ModelInferRequest(model_name="mlp", id="abc")
    theirs.inputs.extend([inp._get_tensor()])
    theirs.raw_input_contents.extend([inp._get_content()])
    ours = pb.ModelInferRequest.FromString(theirs.SerializeToString())
    req, raw = converters.to_infer_request(ours)
    assert raw and req.model == "mlp" and req.version is None and req.id == "abc"
    np.testing.assert_array_equal(req.inputs["input"], x)


def test_typed_request_and_version() -> None:
    msg = pb.ModelInferRequest(model_name="m", model_version="3")
    t = msg.inputs.add(name="ids", datatype="INT64", shape=[2, 2])
    t.contents.int64_contents.extend([1, 2, 3, 4])
    msg.outputs.add(name="out")
    msg.parameters["timeout"].int64_param = 5000
    req, raw = converters.to_infer_request(msg)
    assert not raw and req.version == 3 and req.outputs == ["out"] and req.timeout_us == 5000
    np.testing.assert_array_equal(req.inputs["ids"], np.array([[1, 2], [3, 4]]))
    assert req.inputs["ids"].dtype == np.int64


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda m: m.raw_input_contents.__setitem__(0, b"\0" * 7), "'input'"),
        (lambda m: (setattr(m.inputs[0], "datatype", "BYTES"),  # a length past the data
                    m.raw_input_contents.__setitem__(0, b"\x09\0\0\0ab")), "BYTES element"),
        (lambda m: setattr(m.inputs[0], "datatype", "FLOAT"), "'input'"),
        (lambda m: m.inputs[0].shape.__setitem__(0, -1), "'input'"),
        (lambda m: setattr(m, "model_version", "latest"), "version"),
        (lambda m: setattr(m, "model_name", ""), "empty request"),
        (lambda m: m.raw_input_contents.append(b"x"), "raw_input_contents"),
    ],
)
def test_bad_requests_name_the_problem(mutate, needle: str) -> None:
    msg = _raw_request(input=np.zeros((2, 4), np.float32))
    mutate(msg)
    with pytest.raises(InvalidInputError, match=needle):
        converters.to_infer_request(msg)


def test_typed_count_mismatch_and_no_inputs() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    with pytest.raises(InvalidInputError, match="no inputs"):
        converters.to_infer_request(msg)
    t = msg.inputs.add(name="x", datatype="FP32", shape=[2])
    t.contents.fp32_contents.extend([1.0])
    with pytest.raises(InvalidInputError, match=r"'x'.*holds 1 values"):
        converters.to_infer_request(msg)


def test_response_raw_and_typed() -> None:
    probs = np.random.default_rng(0).random((2, 10), dtype=np.float32)
    result = InferResult(model="mlp", version=7, outputs={"probs": probs}, id="q")
    resp = converters.to_infer_response(result, raw=True)
    assert resp.model_version == "7" and resp.id == "q"
    assert list(resp.outputs[0].shape) == [2, 10] and resp.outputs[0].datatype == "FP32"
    back = np.frombuffer(resp.raw_output_contents[0], np.float32).reshape(2, 10)
    np.testing.assert_array_equal(back, probs)
    typed = converters.to_infer_response(result, raw=False)
    assert not typed.raw_output_contents
    np.testing.assert_allclose(np.array(typed.outputs[0].contents.fp32_contents), probs.ravel())


def test_statistics_roundtrip() -> None:
    s = ModelStats(name="mlp", version=1, inference_count=9, execution_count=3)
    s.success.add(900, 9)
    s.batch_stats[4] = BatchStat(batch_size=4)
    s.batch_stats[4].compute_infer.add(50)
    msg = converters.to_model_statistics(s)
    assert msg.version == "1" and msg.inference_stats.success.count == 9
    assert msg.batch_stats[0].batch_size == 4 and msg.batch_stats[0].compute_infer.ns == 50


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (InvalidInputError("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (ModelNotFoundError("x"), grpc.StatusCode.NOT_FOUND),
        (QueueFullError("x"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (ModelUnavailableError("x"), grpc.StatusCode.UNAVAILABLE),
        (RequestTimeoutError("x"), grpc.StatusCode.DEADLINE_EXCEEDED),
        (RuntimeError("boom"), grpc.StatusCode.INTERNAL),
    ],
)
def test_status_mapping(exc: Exception, code: grpc.StatusCode) -> None:
    assert status.grpc_code(exc) is code


def test_bytes_tensors_raw_and_typed_in_and_out() -> None:
    """BYTES (tritonclient's object arrays) decode from raw and typed contents and encode
    back the same way."""
    import tritonclient.grpc as grpcclient

    data = np.array([[b"a", b""], [b"\xff\x00", b"text"]], dtype=object)
    inp = grpcclient.InferInput("s", [2, 2], "BYTES")
    inp.set_data_from_numpy(data)
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add().CopyFrom(pb.ModelInferRequest.InferInputTensor.FromString(
        inp._get_tensor().SerializeToString()))
    msg.raw_input_contents.append(inp._get_content())
    req, raw = converters.to_infer_request(msg)
    assert raw and req.inputs["s"].tolist() == data.tolist()
    typed = pb.ModelInferRequest(model_name="m")
    t = typed.inputs.add(name="s", datatype="BYTES", shape=[2, 2])
    t.contents.bytes_contents.extend(data.ravel().tolist())
    req, _ = converters.to_infer_request(typed)
    assert req.inputs["s"].tolist() == data.tolist()
    from edge_agent.core.types import InferResult

    result = InferResult(model="m", version=1, outputs={"s": data})
    for as_raw in (True, False):
        response = converters.to_infer_response(result, raw=as_raw)
        assert response.outputs[0].datatype == "BYTES"
        if as_raw:
            assert response.raw_output_contents[0] == inp._get_content()
        else:
            assert list(response.outputs[0].contents.bytes_contents) == data.ravel().tolist()
