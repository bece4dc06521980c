"""KServe v2 datatype names <-> numpy dtypes (BYTES is carried as numpy object arrays)."""

from __future__ import annotations

import numpy as np

from edge_agent.errors import InvalidInputError

_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
_FROM_NUMPY: dict[np.dtype, str] = {v: k for k, v in _TO_NUMPY.items()}


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype that carries KServe ``datatype`` (e.g. ``"FP32"`` -> float32)."""
    try:
        return _TO_NUMPY[datatype]
    except KeyError:
        raise InvalidInputError(
            f"datatype {datatype!r} is not a KServe v2 datatype; expected one of "
            f"{', '.join(_TO_NUMPY)}") from None


def kserve_datatype(dtype: np.dtype) -> str:
    """The KServe datatype name of numpy ``dtype`` (str/bytes arrays map to BYTES)."""
    dtype = np.dtype(dtype)
    name = _FROM_NUMPY.get(dtype)
    if name is not None:
        return name
    if dtype.kind in ("S", "U", "O"):
        return "BYTES"
    raise InvalidInputError(f"numpy dtype {dtype} has no KServe v2 datatype")
