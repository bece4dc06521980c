"""KServe v2 wire datatypes: numpy dtypes (little-endian), typed-contents fields, config enums."""

from __future__ import annotations

from typing import cast

import numpy as np

from edge_agent.errors import InvalidInputError
from edge_agent.protocol.generated import model_config_pb2

# KServe datatype -> little-endian numpy dtype used to read/write raw contents.
WIRE_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype("?"),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}
_BY_KIND_SIZE = {(dt.kind, dt.itemsize): name for name, dt in WIRE_DTYPES.items()}
_BY_DTYPE = {dt: name for name, dt in WIRE_DTYPES.items()}  # fast path for native dtypes

# KServe datatype -> the InferTensorContents field that carries it in typed form (FP16: raw only).
CONTENTS_FIELDS: dict[str, str] = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}

_CONFIG_ENUM = {
    name: model_config_pb2.DataType.Value("TYPE_STRING" if name == "BYTES" else f"TYPE_{name}")
    for name in (*WIRE_DTYPES, "BYTES")
}


def wire_dtype(datatype: str, tensor: str) -> np.dtype:
    """The numpy dtype of tensor ``tensor`` declared as ``datatype``; BYTES is refused."""
    dt = WIRE_DTYPES.get(datatype)
    if dt is not None:
        return dt
    if datatype == "BYTES":
        raise InvalidInputError(
            f"input '{tensor}': BYTES tensors are not supported by this agent; "
            "send numeric tensors (e.g. UINT8 for raw bytes)")
    raise InvalidInputError(
        f"input '{tensor}': datatype {datatype!r} is not a KServe v2 datatype; expected one of "
        f"{', '.join(WIRE_DTYPES)}")


def datatype_of(dtype: np.dtype) -> str:
    """The KServe datatype name of a numpy dtype (any byte order)."""
    name = _BY_DTYPE.get(dtype)
    if name is not None:
        return name
    dtype = np.dtype(dtype)
    name = _BY_KIND_SIZE.get((dtype.kind, dtype.itemsize))
    if name is None:
        if dtype.kind in ("S", "U", "O"):
            return "BYTES"
        raise InvalidInputError(f"numpy dtype {dtype} has no KServe v2 datatype")
    return name


def config_data_type(datatype: str) -> model_config_pb2.DataType:
    """The model_config DataType enum value (TYPE_FP32, ...) of a KServe datatype name."""
    # protoc's .pyi types enum values as DataType; at run time they are the ints held here
    return cast(model_config_pb2.DataType,
                _CONFIG_ENUM.get(datatype, model_config_pb2.DataType.TYPE_INVALID))
