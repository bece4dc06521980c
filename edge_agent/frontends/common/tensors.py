"""Tensors as both wires carry them: the request limits, shape checks and raw bytes.

KServe raw contents (gRPC) and HTTP binary data are the same little-endian bytes; the datatype
table and the BYTES policy are :mod:`packager.bundle.datatypes`, this module adds the agent's
errors.
"""

from __future__ import annotations

import math

import numpy as np

from edge_agent import bytes_tensors
from edge_agent.errors import InvalidInputError
from packager.bundle import datatypes
from packager.bundle.datatypes import FIXED_SIZE, NUMPY_DTYPES

MAX_REQUEST_ID_BYTES = 256
"""A request id longer than this is refused (the id is echoed in the response)."""
MAX_PARAMETERS = 32
"""Parameters per request, and per input or output tensor, at most."""
MAX_PARAMETER_BYTES = 1024
"""Bytes of one parameter's key, or of its string value, at most."""

WIRE_DTYPES = FIXED_SIZE
"""KServe datatype -> the little-endian numpy dtype of its raw contents (BYTES has none)."""

MAX_DIMS = 32  # numpy's limit is 64
MAX_ELEMENTS = 1 << 40  # far past any message size; keeps byte counts inside numpy's intp


def check_shape(name: str, shape: list[int]) -> list[int]:
    """``shape`` of input ``name`` when it is a tensor this agent can hold (both protocols)."""
    if shape and min(shape) < 0:
        raise InvalidInputError(
            f"input '{name}': shape {list(shape)} has a negative dimension; "
            "a request must give concrete sizes")
    if len(shape) > MAX_DIMS or (0 in shape and math.prod(d for d in shape if d) > MAX_ELEMENTS):
        # a non-empty tensor is bounded by its bytes; an empty one passes that check whatever
        # its other dims, and numpy cannot shape it
        raise InvalidInputError(
            f"input '{name}': shape {list(shape)[:8]}{'...' if len(shape) > 8 else ''} "
            f"is not a tensor this agent can hold (at most {MAX_DIMS} dimensions and "
            f"{MAX_ELEMENTS} elements)")
    return shape


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


def tensor_from_bytes(name: str, datatype: str, shape: list[int], raw: bytes | memoryview,
                      source: str = "raw contents") -> np.ndarray:
    """An input tensor from its wire bytes (KServe raw contents, or HTTP binary data): BYTES
    length-prefixed, others little-endian of exactly the shape's size."""
    if datatype == "BYTES":
        return bytes_tensors.decode(raw, shape, name)
    dtype = wire_dtype(datatype, name)
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) != expected:
        raise InvalidInputError(
            f"input '{name}': {source} hold {len(raw)} bytes but shape "
            f"{list(shape)} of {datatype} needs {expected} bytes")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)
