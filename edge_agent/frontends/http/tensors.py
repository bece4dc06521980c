"""KServe v2 REST inference bodies <-> the serving core's values.

A request body is JSON, or (Triton's binary tensor extension) JSON of
``Inference-Header-Content-Length`` bytes followed by the raw bytes of the inputs whose
``parameters.binary_data_size`` says so, in input order. Answers are JSON, or JSON followed by
the raw bytes of the outputs asked for with ``parameters.binary_data`` (or every output with the
request parameter ``binary_data_output``). Inputs and outputs may name a system shared memory
region instead (``shared_memory_region``, ``_byte_size``, ``_offset``), read and written through
the registry the gRPC front end uses. Bounds are the gRPC converters' (id, parameters, shape).
Every refusal is an :class:`~edge_agent.errors.InvalidInputError` naming the tensor.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge_agent import bytes_tensors
from edge_agent.core.api import DataPlaneAPI
from edge_agent.core.types import InferRequest, InferResult
from edge_agent.errors import InvalidInputError
from edge_agent.frontends.common.names import parse_version
from edge_agent.frontends.common.request_options import check_input, check_output, parse_request
from edge_agent.frontends.common.shared_memory import (
    BYTE_SIZE,
    OFFSET,
    REGION,
    Placement,
    SharedMemoryRegistry,
)
from edge_agent.frontends.common.tensors import (
    MAX_PARAMETER_BYTES,
    MAX_PARAMETERS,
    MAX_REQUEST_ID_BYTES,
    DeclaredInputs,
    check_shape,
    datatype_of,
    tensor_from_bytes,
    wire_dtype,
)
from edge_agent.frontends.common.typed_budget import BYTES_OBJECT, TypedBudget
from edge_agent.frontends.http.jsonscan import to_array
from packager.bundle.datatypes import NUMPY_DTYPES

HEADER_LENGTH = "Inference-Header-Content-Length"
BINARY_SIZE = "binary_data_size"
_NUMPY_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}
"""Target dtype kind -> the kinds of JSON-inferred arrays it accepts (no bool<->number)."""


@dataclass(slots=True)
class InferCall:
    """One decoded REST inference request: what the core runs and how to answer it."""

    request: InferRequest
    binary: set[str] = field(default_factory=set)
    """Outputs answered as raw bytes after the JSON."""
    all_binary: bool = False
    """``binary_data_output``: every output not named in ``outputs`` is answered raw."""
    placed: dict[str, Placement] | None = None
    """Outputs written to shared memory (no bytes in the answer)."""
    placed_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    classes: dict[str, int] = field(default_factory=dict)
    """Output name -> the class count it asks for (the classification extension)."""


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInputError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {json.dumps(value)[:40]}")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{what} must be an integer >= 0, got {json.dumps(value)[:40]}")
    return value


def _parameters(body: Mapping[str, Any], what: str) -> dict[str, Any]:
    params = _object(body.get("parameters", {}), f"{what}: 'parameters'")
    if len(params) > MAX_PARAMETERS:
        raise InvalidInputError(
            f"{what} has {len(params)} parameters; at most {MAX_PARAMETERS} are accepted")
    for key, value in params.items():
        if len(key.encode()) > MAX_PARAMETER_BYTES or (
                isinstance(value, str) and len(value.encode()) > MAX_PARAMETER_BYTES):
            raise InvalidInputError(f"{what}: parameter {key[:40]!r} is longer than "
                                    f"{MAX_PARAMETER_BYTES} bytes (key or string value)")
    return params


def _shape(tensor: Mapping[str, Any], name: str) -> list[int]:
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise InvalidInputError(f"input '{name}': 'shape' must be a list of integers, got "
                                f"{json.dumps(shape)[:60]}")
    return check_shape(name, shape)


def _region(params: Mapping[str, Any], what: str) -> tuple[str, int, int] | None:
    if REGION not in params:
        return None
    name = params[REGION]
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{what}: parameter '{REGION}' must be a region name (string)")
    if BYTE_SIZE not in params:
        raise InvalidInputError(f"{what}: parameter '{BYTE_SIZE}' is missing")
    return (name, _int(params.get(OFFSET, 0), f"{what}: parameter '{OFFSET}'"),
            _int(params[BYTE_SIZE], f"{what}: parameter '{BYTE_SIZE}'"))


def _from_binary(name: str, datatype: str, shape: list[int], raw: memoryview) -> np.ndarray:
    return tensor_from_bytes(name, datatype, shape, raw, "binary data")


def _leaves(data: list[Any], name: str, shape: list[int]) -> list[Any]:
    """The values of nested JSON arrays ``data`` in row-major order (flat data is accepted as
    it is); refused when ragged."""
    level = data
    while level and isinstance(level[0], list):
        size = len(level[0])
        if not all(isinstance(x, list) and len(x) == size for x in level):
            break
        level = [v for x in level for v in x]
    if any(isinstance(v, list) for v in level):
        raise InvalidInputError(f"input '{name}': 'data' is not a regular array of {shape} "
                                "values")
    return level


def _bytes_from_json(name: str, shape: list[int], data: list[Any]) -> np.ndarray:
    values = _leaves(data, name, shape)
    if len(values) != math.prod(shape):
        raise InvalidInputError(f"input '{name}': 'data' holds {len(values)} values but shape "
                                f"{shape} needs {math.prod(shape)}")
    if not all(isinstance(v, str) for v in values):
        raise InvalidInputError(f"input '{name}': BYTES data must be JSON strings (or "
                                "send the tensor as binary data)")
    # straight into an object array: numpy's str array would be as wide as the longest string
    # times the count
    return np.fromiter((v.encode() for v in values), dtype=object,
                       count=len(values)).reshape(shape)


def _json_cost(datatype: str, count: int) -> int:
    """Bytes that converting ``count`` JSON values takes: numpy's array of them and the
    tensor (a pointer and a bytes object each for BYTES)."""
    if datatype == "BYTES":
        return count * (8 + BYTES_OBJECT)
    dtype = NUMPY_DTYPES.get(datatype)
    itemsize: int = dtype.itemsize if dtype is not None else 8
    return count * (8 + itemsize)


def _from_json(name: str, datatype: str, shape: list[int], data: Any,
               declared: DeclaredInputs | None = None,
               budget: TypedBudget | None = None) -> np.ndarray:
    if not isinstance(data, list):
        raise InvalidInputError(f"input '{name}': 'data' must be a JSON array (or send the "
                                f"tensor as binary data), got {type(data).__name__}")
    if declared is not None:
        declared.check(name, datatype, shape)
    count = math.prod(shape)
    if budget is not None:
        budget.charge(_json_cost(datatype, count), f"input '{name}' ({count} JSON values)")
    if datatype == "BYTES":
        return _bytes_from_json(name, shape, data)
    try:
        array = to_array(data)
    except (ValueError, RecursionError):  # ragged or too deep nesting
        raise InvalidInputError(f"input '{name}': 'data' is not a regular array of "
                                f"{datatype} values") from None
    if array.size != count:
        raise InvalidInputError(f"input '{name}': 'data' holds {array.size} values but shape "
                                f"{shape} needs {count}")
    dtype = wire_dtype(datatype, name)
    accepted = _NUMPY_KINDS.get(dtype.kind, "")
    if count and array.dtype.kind not in accepted:
        raise InvalidInputError(f"input '{name}': 'data' holds values that are not "
                                f"{datatype} (JSON {'booleans' if dtype.kind == 'b' else 'numbers'}"
                                " expected)")
    if count and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if array.min() < info.min or array.max() > info.max:
            raise InvalidInputError(f"input '{name}': a value is out of the range of "
                                    f"{datatype}")
    return array.astype(dtype, copy=False).reshape(shape)


def decode_request(body: bytes, header_length: int | None, model: str, version: str,
                   shm: SharedMemoryRegistry | None,
                   output_count: Callable[[], int] | None = None,
                   loads: Callable[[bytes], Any] = json.loads, *,
                   dataplane: DataPlaneAPI | None = None,
                   budget: TypedBudget | None = None) -> InferCall:
    """Decode a ``POST v2/models/MODEL[/versions/V]/infer`` body; ``output_count`` (the
    model's, asked only when several outputs are named) bounds the outputs asked for;
    ``loads`` parses the JSON. JSON ``data`` is checked against what ``dataplane`` says the
    model declares and charged to ``budget`` before it is converted."""
    if header_length is None:
        header_length = len(body)
    elif header_length > len(body):
        raise InvalidInputError(f"{HEADER_LENGTH} is {header_length} but the body holds only "
                                f"{len(body)} bytes")
    try:
        doc = loads(memoryview(body)[:header_length].tobytes() if header_length < len(body)
                    else body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidInputError(f"the request body is not valid JSON: {exc}") from None
    doc = _object(doc, "the request body")
    where = f"request for model '{model}'"
    request_id = _text(doc.get("id", ""), f"{where}: 'id'")
    if len(request_id.encode()) > MAX_REQUEST_ID_BYTES:
        raise InvalidInputError(f"request id is {len(request_id.encode())} bytes; at most "
                                f"{MAX_REQUEST_ID_BYTES} are accepted")
    options = parse_request(_parameters(doc, where), "http", model)
    tensors = doc.get("inputs")
    if not isinstance(tensors, list) or not tensors:
        raise InvalidInputError(f"{where} has no inputs ('inputs' must be a non-empty list)")
    inputs: dict[str, np.ndarray] = {}
    declared = None if dataplane is None else \
        DeclaredInputs(dataplane, model, parse_version(version, model))
    binary = memoryview(body)[header_length:]
    at = 0
    for i, item in enumerate(tensors):
        tensor = _object(item, f"{where}: inputs[{i}]")
        name = _text(tensor.get("name"), f"{where}: inputs[{i}].name")
        if name in inputs:
            raise InvalidInputError(f"input '{name}' is given more than once")
        datatype = _text(tensor.get("datatype"), f"input '{name}': 'datatype'")
        shape = _shape(tensor, name)
        tparams = _parameters(tensor, f"input '{name}'")
        check_input(tparams, "http", name)
        ref = _region(tparams, f"input '{name}'")
        size = tparams.get(BINARY_SIZE)
        given = (ref is not None) + (size is not None) + ("data" in tensor)
        if given != 1:
            raise InvalidInputError(
                f"input '{name}': give exactly one of 'data', parameters.{BINARY_SIZE} "
                f"(binary data after the JSON) and parameters.{REGION} (shared memory)")
        if ref is not None:
            if shm is None:
                raise InvalidInputError(f"input '{name}': shared memory is not served here "
                                        "(over HTTP only with [http] shared_memory = true); "
                                        "send the tensor in the request")
            inputs[name] = shm.read_input(ref, name, wire_dtype(datatype, name), shape)
        elif size is not None:
            size = _int(size, f"input '{name}': parameter '{BINARY_SIZE}'")
            if at + size > len(binary):
                raise InvalidInputError(
                    f"input '{name}': {BINARY_SIZE} {size} goes past the end of the binary "
                    f"data ({len(binary)} bytes after the {header_length}-byte JSON header)")
            inputs[name] = _from_binary(name, datatype, shape, binary[at:at + size])
            at += size
        else:
            inputs[name] = _from_json(name, datatype, shape, tensor["data"], declared, budget)
    if at != len(binary):
        raise InvalidInputError(
            f"{where}: {len(binary) - at} bytes after the JSON header belong to no input "
            f"(set {HEADER_LENGTH} to the JSON's length and {BINARY_SIZE} on each binary input)")
    call = InferCall(InferRequest(model=model, inputs=inputs,
                                  version=parse_version(version, model), id=request_id,
                                  timeout_us=options.timeout_us, priority=options.priority,
                                  sequence=options.sequence))
    call.all_binary = options.binary_data_output
    _decode_outputs(doc.get("outputs"), call, where, shm, output_count)
    return call


def _decode_outputs(outputs: Any, call: InferCall, where: str,
                    shm: SharedMemoryRegistry | None,
                    output_count: Callable[[], int] | None) -> None:
    if outputs is None:
        return
    if not isinstance(outputs, list):
        raise InvalidInputError(f"{where}: 'outputs' must be a list")
    if len(outputs) > 1 and output_count is not None and len(outputs) > output_count():
        raise InvalidInputError(f"{where} asks for {len(outputs)} outputs; the model has "
                                f"{output_count()}: name each output once")
    names: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(outputs):
        out = _object(item, f"{where}: outputs[{i}]")
        name = _text(out.get("name"), f"{where}: outputs[{i}].name")
        if name in seen:
            raise InvalidInputError(f"{where} asks for output '{name}' more than once; name "
                                    "each output once")
        seen.add(name)
        names.append(name)
        params = _parameters(out, f"output '{name}'")
        count = check_output(params, "http", name)
        if count:
            call.classes[name] = count
        ref = _region(params, f"output '{name}'")
        if ref is not None:
            if shm is None:
                raise InvalidInputError(f"output '{name}': shared memory is not served here "
                                        "(over HTTP only with [http] shared_memory = true)")
            if call.placed is None:
                call.placed = {}
            call.placed[name] = shm.placement(ref, name)
            call.placed_params[name] = {k: params[k] for k in (REGION, BYTE_SIZE, OFFSET)
                                        if k in params}
            continue
        wanted = params.get("binary_data", call.all_binary)
        if not isinstance(wanted, bool):
            raise InvalidInputError(f"output '{name}': parameter 'binary_data' must be true "
                                    "or false")
        if wanted:
            call.binary.add(name)
    call.request.outputs = names


def _json_data(name: str, datatype: str, array: np.ndarray) -> list[Any]:
    if datatype != "BYTES":
        values: list[Any] = array.ravel().tolist()
        return values
    try:
        return [e.decode() for e in bytes_tensors.elements(array, name)]
    except UnicodeDecodeError:
        raise InvalidInputError(f"output '{name}' holds bytes that are not UTF-8 text; ask "
                                "for it with parameters.binary_data = true") from None


def encode_response(result: InferResult, call: InferCall) -> tuple[bytes, int | None]:
    """The answer's body and, when raw outputs follow the JSON, the JSON's length."""
    names = call.request.outputs or list(result.outputs)
    every = call.all_binary and not call.request.outputs
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name in names:
        array = result.outputs[name]
        datatype = datatype_of(array.dtype)
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if call.placed and name in call.placed:
            # no parameters echoed, as Triton answers: its C++ client (perf_analyzer) reads
            # binary_data_size from any output that has parameters
            SharedMemoryRegistry.write_output(call.placed[name], name, array)
        elif every or name in call.binary:
            if datatype == "BYTES":
                raw = bytes_tensors.encode(array, name)
            else:
                if array.dtype.byteorder == ">":
                    array = array.astype(array.dtype.newbyteorder("<"))
                raw = np.ascontiguousarray(array).tobytes()
            blobs.append(raw)
            entry["parameters"] = {BINARY_SIZE: len(raw)}
        else:
            entry["data"] = _json_data(name, datatype, array)
        outputs.append(entry)
    doc: dict[str, Any] = {"model_name": result.model, "model_version": str(result.version)}
    if result.id:
        doc["id"] = result.id
    doc["outputs"] = outputs
    header = json.dumps(doc, separators=(",", ":")).encode()
    if not blobs:
        return header, None
    return b"".join((header, *blobs)), len(header)
