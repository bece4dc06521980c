"""KServe v2 datatypes and the numpy dtypes that carry them: the one table of the packager,
the agent's core and its protocol edge (the names themselves are ``manifest.DATATYPES``).

The agent's wire edge (``edge_agent.frontends.grpc.wire_types``) adds only what is the wire's: the
typed-contents fields, the model_config enum and its refusals as the agent's errors.

Dtypes are little-endian, the byte order of KServe's raw tensor contents. BYTES (ONNX STRING)
is a manifest datatype carried in memory as numpy object arrays; it has no fixed size, so it
is not fed to parity checks, and on the wire its elements are length-prefixed
(``edge_agent.bytes_tensors``).
"""

from __future__ import annotations

import numpy as np

from packager.bundle.errors import BundleError
from packager.bundle.manifest import DATATYPES

NUMPY_DTYPES: dict[str, np.dtype] = {
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
    "BYTES": np.dtype(object),
}
"""KServe datatype -> numpy dtype; its keys are ``manifest.DATATYPES``, in order."""

FIXED_SIZE: dict[str, np.dtype] = {k: v for k, v in NUMPY_DTYPES.items() if k != "BYTES"}
"""The datatypes with a fixed item size: every one but BYTES."""

_BY_KIND_SIZE = {(dt.kind, dt.itemsize): name for name, dt in FIXED_SIZE.items()}
_BY_DTYPE = {dt: name for name, dt in FIXED_SIZE.items()}  # fast path for native dtypes

if tuple(NUMPY_DTYPES) != DATATYPES:  # pragma: no cover - a table edited on one side only
    raise ImportError("packager.bundle.datatypes.NUMPY_DTYPES and manifest.DATATYPES disagree")


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype of a manifest's KServe ``datatype`` (BYTES: object); BundleError for a
    name that is not one (the manifest is not a valid one)."""
    dtype = NUMPY_DTYPES.get(datatype)
    if dtype is None:
        raise BundleError(f"datatype {datatype!r} is not a KServe v2 datatype; expected one of "
                          f"{', '.join(NUMPY_DTYPES)}")
    return dtype


def datatype_of(dtype: np.dtype) -> str | None:
    """The KServe datatype of a numpy dtype in any byte order (str/bytes/object: BYTES), or
    None when there is none (complex, datetime, ...)."""
    name = _BY_DTYPE.get(dtype)
    if name is not None:
        return name
    dtype = np.dtype(dtype)
    name = _BY_KIND_SIZE.get((dtype.kind, dtype.itemsize))
    if name is None and dtype.kind in ("S", "U", "O"):
        return "BYTES"
    return name
