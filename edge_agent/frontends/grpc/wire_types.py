"""What the gRPC wire adds to the KServe v2 datatypes: typed-contents fields and config enums.

The datatype table and the BYTES policy are :mod:`packager.bundle.datatypes`; the numpy dtype of
raw contents (the same on both wires) is :mod:`edge_agent.frontends.common.tensors`.
"""

from __future__ import annotations

from typing import cast

from edge_agent.frontends.grpc.generated import model_config_pb2
from packager.bundle.datatypes import NUMPY_DTYPES

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


def config_data_type(datatype: str) -> model_config_pb2.DataType:
    """The model_config DataType enum value (TYPE_FP32, ...) of a KServe datatype name."""
    # protoc's .pyi types enum values as DataType; at run time they are the ints held here
    return cast(model_config_pb2.DataType,
                _CONFIG_ENUM.get(datatype, model_config_pb2.DataType.TYPE_INVALID))
