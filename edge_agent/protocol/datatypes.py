"""KServe v2 wire datatypes: numpy dtypes (little-endian), typed-contents fields, config enums.

The datatype table and the BYTES policy are :mod:`packager.bundle.datatypes`; this module adds
what is the wire's, with the agent's errors.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from edge_agent.errors import InvalidInputError
from edge_agent.protocol.generated import model_config_pb2
from packager.bundle import datatypes
from packager.bundle.datatypes import FIXED_SIZE, NUMPY_DTYPES

WIRE_DTYPES = FIXED_SIZE
"""KServe datatype -> the little-endian numpy dtype of its raw contents (BYTES has none)."""


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
    for name in NUMPY_DTYPES
}


def wire_dtype(datatype: str, tensor: str) -> np.dtype:
    """The numpy dtype of tensor ``tensor`` declared as ``datatype`` (BYTES: object, its
    elements length-prefixed on the wire, see :mod:`edge_agent.bytes_tensors`)."""
    dt = NUMPY_DTYPES.get(datatype)
    if dt is not None:
        return dt
    raise InvalidInputError(
        f"input '{tensor}': datatype {datatype!r} is not a KServe v2 datatype; expected one of "
        f"{', '.join(NUMPY_DTYPES)}")


def datatype_of(dtype: np.dtype) -> str:
    """The KServe datatype name of numpy ``dtype`` in any byte order (str/bytes arrays map to
    BYTES); InvalidInputError if it has none."""
    name = datatypes.datatype_of(dtype)
    if name is None:
        raise InvalidInputError(f"numpy dtype {dtype} has no KServe v2 datatype")
    return name


def config_data_type(datatype: str) -> model_config_pb2.DataType:
    """The model_config DataType enum value (TYPE_FP32, ...) of a KServe datatype name."""
    # protoc's .pyi types enum values as DataType; at run time they are the ints held here
    return cast(model_config_pb2.DataType,
                _CONFIG_ENUM.get(datatype, model_config_pb2.DataType.TYPE_INVALID))
