"""Bound a JSON body before it is parsed: how many values it holds and how deep it nests.

``json.loads`` builds a Python object per value (an empty array costs ~64 bytes for its 3
bytes of text) in one call that holds the GIL, so the size of a body alone bounds neither its
memory nor how long it stalls the other threads. :func:`scan` counts, without building
anything, the values (``,`` outside strings, plus :data:`CONTAINER_WEIGHT` for each ``[`` and
``{``: the values parsed, give or take one, arrays and objects weighed by what they cost to
build) and the deepest nesting, in slices of :data:`SLICE` bytes with numpy, so that no single
step holds the GIL for long. Text that is not valid JSON may be counted loosely: the parser
refuses it anyway, having built no more than the count up to its first invalid byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SLICE = 256 * 1024
CONTAINER_WEIGHT = 8
"""An array or object counts as this many values: json.loads took ~6x as long to build 262,144
empty arrays as 262,144 floats (and each takes 64 bytes to a float's 32)."""
_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_OPENS = (ord("["), ord("{"))
_CLOSES = (ord("]"), ord("}"))


@dataclass(frozen=True, slots=True)
class JsonShape:
    """What :func:`scan` found: values (upper bound), deepest nesting."""

    values: int
    depth: int


class JsonTooLarge(Exception):
    """The body holds more values (``status`` 413), or nests deeper (400), than allowed."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def scan(text: bytes | memoryview, max_values: int, max_depth: int,
         slice_bytes: int = SLICE) -> JsonShape:
    """Count values and nesting of ``text`` (``slice_bytes`` at a time); JsonTooLarge as soon
    as a bound is passed."""
    data = memoryview(text).cast("B")
    values = depth = deepest = 0
    in_string = False
    start = 0
    while start < len(data):
        end = min(start + slice_bytes, len(data))
        while end < len(data) and data[end - 1] == _BACKSLASH:  # end after an escape, whole
            end += 1
        chunk = bytes(data[start:end])
        start = end
        if b"\\" in chunk:  # escaped quotes and backslashes are not structure
            chunk = chunk.replace(b"\\\\", b"__").replace(b'\\"', b"__")
        raw = np.frombuffer(chunk, np.uint8)
        quotes = raw == _QUOTE
        inside = np.bitwise_xor.accumulate(quotes)
        if in_string:
            inside ^= True
        outside = ~inside & ~quotes
        opens = ((raw == _OPENS[0]) | (raw == _OPENS[1])) & outside
        closes = ((raw == _CLOSES[0]) | (raw == _CLOSES[1])) & outside
        values += (CONTAINER_WEIGHT * int(np.count_nonzero(opens))
                   + int(np.count_nonzero(outside & (raw == _COMMA))))
        if values > max_values:
            raise JsonTooLarge(f"the JSON body holds more than {max_values} values (arrays and "
                               f"objects count {CONTAINER_WEIGHT}; http.max_json_elements); "
                               "send large tensors as binary data "
                               "(parameters.binary_data_size) or in several requests", 413)
        if opens.any():
            level = np.cumsum(opens.astype(np.int32) - closes.astype(np.int32)) + depth
            deepest = max(deepest, int(level.max()))
            depth = int(level[-1])
        elif closes.any():
            depth -= int(np.count_nonzero(closes))
        if deepest > max_depth:
            raise JsonTooLarge(f"the JSON body nests deeper than {max_depth} levels "
                               "(http.max_json_depth)", 400)
        in_string = bool(inside[-1]) if len(inside) else in_string
    return JsonShape(values, deepest)
