"""Tensors as both wires carry them: the request limits, shape checks, raw bytes and the
check of a tensor sent as values against what the model declares.

KServe raw contents (gRPC) and HTTP binary data are the same little-endian bytes; the datatype
table and the BYTES policy are :mod:`packager.bundle.datatypes`, this module adds the agent's
errors.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from edge_agent import bytes_tensors
from edge_agent.core.api import DataPlaneAPI
from edge_agent.core.types import ModelMetadata
from edge_agent.errors import AgentError, InvalidInputError
from packager.bundle import datatypes
from packager.bundle.datatypes import FIXED_SIZE, NUMPY_DTYPES

MAX_REQUEST_ID_BYTES = 256
"""A request id longer than this is refused (the id is echoed in the response)."""
MAX_PARAMETERS = 32
"""Parameters per request, and per input or output tensor, at most."""
MAX_PARAMETER_BYTES = 1024
"""Bytes of one parameter's key, or of its string value, at most."""
MAX_TENSORS = 1024
"""Inputs, and outputs, one gRPC request may name, at most (each at most once): a longer list
is refused before it is read (HTTP refuses more outputs than the model's own count)."""

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


class DeclaredInputs:
    """The inputs a request's model version declares, to refuse a tensor sent as values (gRPC
    typed contents, HTTP JSON data) from its declared datatype and shape alone, before its
    values are decoded. Looked up once, on the first check; a model the lookup cannot describe
    is left to the data plane (it answers as it would have)."""

    __slots__ = ("_dataplane", "_looked_up", "_meta", "_model", "_version")

    def __init__(self, dataplane: DataPlaneAPI, model: str, version: int | None) -> None:
        self._dataplane = dataplane
        self._model = model
        self._version = version
        self._meta: ModelMetadata | None = None
        self._looked_up = False

    def _metadata(self) -> ModelMetadata | None:
        if not self._looked_up:
            self._looked_up = True
            with contextlib.suppress(AgentError):  # the data plane answers it as before
                self._meta = self._dataplane.model_metadata(self._model, self._version)
        return self._meta

    def check(self, name: str, datatype: str, shape: list[int]) -> None:
        """Refuse input ``name`` declared as ``datatype`` of ``shape`` when the model cannot
        take it (InvalidInputError naming what the model expects; nothing was decoded)."""
        meta = self._metadata()
        spec = None if meta is None else next((s for s in meta.inputs if s.name == name), None)
        if meta is None or spec is None:
            return
        label = f"model {self._model!r} input {name!r}"
        if datatype != spec.datatype:
            raise InvalidInputError(
                f"{label} is declared {datatype} but the model expects {spec.datatype}; "
                "its values were not decoded")
        if len(shape) != len(spec.shape) or any(
                want >= 0 and got != want for got, want in zip(shape, spec.shape, strict=True)):
            raise InvalidInputError(
                f"{label} is declared with shape {shape[:8]} but the model expects "
                f"{list(spec.shape)} (-1 is free); its values were not decoded")
        if meta.max_batch_size > 0 and shape and shape[0] > meta.max_batch_size:
            raise InvalidInputError(
                f"{label} is declared with {shape[0]} rows but max_batch_size is "
                f"{meta.max_batch_size}; split it into smaller requests")
