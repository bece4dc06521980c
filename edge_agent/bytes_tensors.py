"""BYTES tensors as bytes: each element a 4-byte little-endian length and its bytes.

This is KServe v2's raw layout for BYTES (``raw_input_contents``, ``raw_output_contents``) and
what carries BYTES tensors to runtime processes. In memory a BYTES tensor is a numpy object
array of ``bytes`` (str elements are sent as UTF-8).
"""

from __future__ import annotations

import math
import struct

import numpy as np

from edge_agent.errors import InvalidInputError

_LEN = struct.Struct("<I")


def elements(array: np.ndarray, name: str = "") -> list[bytes]:
    """``array``'s elements as bytes (str as UTF-8); InvalidInputError for anything else."""
    out: list[bytes] = []
    for item in array.reshape(-1):
        if isinstance(item, str):
            out.append(item.encode("utf-8"))
        elif isinstance(item, bytes | bytearray | memoryview | np.bytes_):
            out.append(bytes(item))
        else:
            raise InvalidInputError(f"tensor {name!r} holds a {type(item).__name__}; a BYTES "
                                    "tensor holds bytes")
    return out


def encode(array: np.ndarray, name: str = "") -> bytes:
    """``array``'s elements length-prefixed (see :func:`elements`)."""
    parts: list[bytes] = []
    for item in elements(array, name):
        parts.append(_LEN.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def decode(data: bytes | memoryview, shape: tuple[int, ...] | list[int],
           name: str = "") -> np.ndarray:
    """The object array of ``shape`` whose elements ``data`` holds length-prefixed;
    InvalidInputError when ``data`` is not exactly that."""
    view = memoryview(data)
    count = math.prod(shape)
    out = np.empty(count, dtype=object)
    pos = 0
    for i in range(count):
        if pos + _LEN.size > len(view):
            raise InvalidInputError(f"input '{name}': BYTES contents end after {i} of {count} "
                                    f"elements of shape {list(shape)}")
        (n,) = _LEN.unpack_from(view, pos)
        pos += _LEN.size
        if pos + n > len(view):
            raise InvalidInputError(f"input '{name}': BYTES element {i} says {n} bytes, but "
                                    f"only {len(view) - pos} follow")
        out[i] = bytes(view[pos:pos + n])
        pos += n
    if pos != len(view):
        raise InvalidInputError(f"input '{name}': {len(view) - pos} bytes follow the "
                                f"{count} BYTES elements of shape {list(shape)}")
    return out.reshape(shape)
