"""KServe v2 datatype names <-> numpy dtypes for the serving core, with the agent's errors.

The table is :mod:`packager.datatypes` (BYTES is carried as numpy object arrays).
"""

from __future__ import annotations

import numpy as np

from edge_agent.errors import InvalidInputError
from packager.datatypes import NUMPY_DTYPES
from packager.datatypes import datatype_of as _datatype_of
from packager.datatypes import numpy_dtype as _numpy_dtype


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype that carries KServe ``datatype`` (e.g. ``"FP32"`` -> float32)."""
    dtype = _numpy_dtype(datatype)
    if dtype is None:
        raise InvalidInputError(
            f"datatype {datatype!r} is not a KServe v2 datatype; expected one of "
            f"{', '.join(NUMPY_DTYPES)}")
    return dtype


def kserve_datatype(dtype: np.dtype) -> str:
    """The KServe datatype name of numpy ``dtype`` in any byte order (str/bytes arrays map to
    BYTES)."""
    name = _datatype_of(dtype)
    if name is None:
        raise InvalidInputError(f"numpy dtype {dtype} has no KServe v2 datatype")
    return name
