"""REST tensor bodies: JSON and binary forms decoded and encoded as the core's arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edge_agent import bytes_tensors
from edge_agent.core.types import InferResult
from edge_agent.errors import InvalidInputError
from edge_agent.frontends.http.tensors import decode_request, encode_response


def _doc(*inputs: dict, **extra: object) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def test_json_tensors_of_every_kind() -> None:
    body = _doc({"name": "f", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3.5, 4]]},
                {"name": "b", "shape": [2], "datatype": "BOOL", "data": [True, False]},
                {"name": "i", "shape": [1], "datatype": "INT8", "data": [-128]},
                {"name": "s", "shape": [2], "datatype": "BYTES", "data": ["héllo", ""]},
                id="7", parameters={"timeout": 5000})
    call = decode_request(body, None, "m", "3", None)
    r = call.request
    assert (r.model, r.version, r.id, r.timeout_us) == ("m", 3, "7", 5000)
    np.testing.assert_array_equal(r.inputs["f"], np.array([[1, 2], [3.5, 4]], np.float32))
    assert r.inputs["f"].dtype == np.float32 and r.inputs["b"].dtype == np.bool_
    assert r.inputs["i"].dtype == np.int8 and r.inputs["i"][0] == -128
    assert list(r.inputs["s"]) == ["héllo".encode(), b""]


@pytest.mark.parametrize(("tensor", "needle"), [
    ({"name": "i", "shape": [1], "datatype": "UINT8", "data": [256]}, "out of the range"),
    ({"name": "i", "shape": [1], "datatype": "INT32", "data": [1.5]}, "not INT32"),
    ({"name": "b", "shape": [1], "datatype": "BOOL", "data": [1]}, "booleans"),
    ({"name": "s", "shape": [1], "datatype": "BYTES", "data": [1]}, "strings"),
    ({"name": "f", "shape": [1], "datatype": "FP32", "data": 1.0}, "JSON array"),
    ({"name": "f", "shape": [1], "datatype": "FP32"}, "exactly one of"),
    ({"name": "f", "shape": [1], "datatype": "FP32", "data": [1.0],
      "parameters": {"binary_data_size": 4}}, "exactly one of"),
])
def test_json_tensor_refusals(tensor: dict, needle: str) -> None:
    with pytest.raises(InvalidInputError, match=needle):
        decode_request(_doc(tensor), None, "m", "", None)


def test_binary_tensors_and_bytes() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = np.array([b"ab", b"\xff"], dtype=object)
    raw_s = bytes_tensors.encode(s, "s")
    header = _doc({"name": "x", "shape": [2, 3], "datatype": "FP32",
                   "parameters": {"binary_data_size": x.nbytes}},
                  {"name": "s", "shape": [2], "datatype": "BYTES",
                   "parameters": {"binary_data_size": len(raw_s)}},
                  outputs=[{"name": "y", "parameters": {"binary_data": True}},
                           {"name": "t"}])
    call = decode_request(header + x.tobytes() + raw_s, len(header), "m", "", None)
    np.testing.assert_array_equal(call.request.inputs["x"], x)
    assert list(call.request.inputs["s"]) == [b"ab", b"\xff"]
    assert call.request.outputs == ["y", "t"] and call.binary == {"y"}
    result = InferResult("m", 2, {"y": x * 2, "t": np.array([b"ok"], dtype=object)}, id="q")
    body, length = encode_response(result, call)
    assert length is not None
    doc = json.loads(body[:length])
    assert doc["model_version"] == "2" and doc["id"] == "q"
    assert doc["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [2, 3],
                                 "parameters": {"binary_data_size": x.nbytes}}
    assert doc["outputs"][1]["data"] == ["ok"]
    np.testing.assert_array_equal(np.frombuffer(body[length:], np.float32).reshape(2, 3), x * 2)


def test_binary_data_output_and_non_utf8_bytes() -> None:
    call = decode_request(_doc({"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]},
                               parameters={"binary_data_output": True}), None, "m", "", None)
    result = InferResult("m", 1, {"y": np.array([1.0], np.float64),
                                  "t": np.array([b"\xff"], dtype=object)})
    body, length = encode_response(result, call)
    assert length is not None and len(body) > length
    plain = decode_request(_doc({"name": "x", "shape": [1], "datatype": "FP32",
                                 "data": [1.0]}), None, "m", "", None)
    with pytest.raises(InvalidInputError, match="binary_data"):
        encode_response(result, plain)
