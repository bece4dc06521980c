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

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

SLICE = 256 * 1024
PIECE = 8192
""":func:`loads` parses at most about this many values per ``json.loads`` call (a few ms)."""
CONTAINER_WEIGHT = 8
"""An array or object counts as this many values: json.loads took ~6x as long to build 262,144
empty arrays as 262,144 floats (and each takes 64 bytes to a float's 32)."""
_QUOTE, _BACKSLASH, _COMMA, _COLON = ord('"'), ord("\\"), ord(","), ord(":")
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


def _slices(data: memoryview, slice_bytes: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(offset, bytes as uint8, mask of the bytes outside strings that are not quotes) of each
    slice of ``data``; escaped quotes and backslashes are blanked (never structure)."""
    in_string = False
    start = 0
    while start < len(data):
        end = min(start + slice_bytes, len(data))
        while end < len(data) and data[end - 1] == _BACKSLASH:  # end after an escape, whole
            end += 1
        chunk = bytes(data[start:end])
        offset, start = start, end
        if b"\\" in chunk:
            chunk = chunk.replace(b"\\\\", b"__").replace(b'\\"', b"__")
        raw = np.frombuffer(chunk, np.uint8)
        quotes = raw == _QUOTE
        inside = np.bitwise_xor.accumulate(quotes)
        if in_string:
            inside ^= True
        in_string = bool(inside[-1])
        yield offset, raw, ~inside & ~quotes


def _levels(opens: np.ndarray, closes: np.ndarray, depth: int) -> np.ndarray:
    """The nesting after each byte of a slice that starts at ``depth``."""
    return np.cumsum(opens.astype(np.int32) - closes.astype(np.int32)) + depth


def scan(text: bytes | memoryview, max_values: int, max_depth: int,
         slice_bytes: int = SLICE) -> JsonShape:
    """Count values and nesting of ``text`` (``slice_bytes`` at a time); JsonTooLarge as soon
    as a bound is passed."""
    values = depth = deepest = 0
    for _, raw, outside in _slices(memoryview(text).cast("B"), slice_bytes):
        opens = ((raw == _OPENS[0]) | (raw == _OPENS[1])) & outside
        closes = ((raw == _CLOSES[0]) | (raw == _CLOSES[1])) & outside
        if opens.any():
            level = _levels(opens, closes, depth)
            deepest = max(deepest, int(level.max()))
            depth = int(level[-1])
        elif closes.any():
            depth -= int(np.count_nonzero(closes))
        if deepest > max_depth:
            raise JsonTooLarge(f"the JSON body nests deeper than {max_depth} levels "
                               "(http.max_json_depth)", 400)
        values += (CONTAINER_WEIGHT * int(np.count_nonzero(opens))
                   + int(np.count_nonzero(outside & (raw == _COMMA))))
        if values > max_values:
            raise JsonTooLarge(f"the JSON body holds more than {max_values} values (arrays and "
                               f"objects count {CONTAINER_WEIGHT}; http.max_json_elements); "
                               "send large tensors as binary data "
                               "(parameters.binary_data_size) or in several requests", 413)
    return JsonShape(values, deepest)


class _Structure:
    """Every ``[ ] { } , :`` outside strings: its offset, the byte, the nesting after it."""

    def __init__(self, data: memoryview, slice_bytes: int) -> None:
        offsets: list[np.ndarray] = []
        chars: list[np.ndarray] = []
        levels: list[np.ndarray] = []
        depth = 0
        for offset, raw, outside in _slices(data, slice_bytes):
            opens = ((raw == _OPENS[0]) | (raw == _OPENS[1])) & outside
            closes = ((raw == _CLOSES[0]) | (raw == _CLOSES[1])) & outside
            level = _levels(opens, closes, depth)
            if len(level):
                depth = int(level[-1])
            marks = opens | closes | (outside & ((raw == _COMMA) | (raw == _COLON)))
            where = np.flatnonzero(marks)
            offsets.append(where + offset)
            chars.append(raw[where])
            levels.append(level[where])
        self.offsets = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
        self.chars = np.concatenate(chars) if chars else np.zeros(0, np.uint8)
        self.levels = np.concatenate(levels) if levels else np.zeros(0, np.int32)


def _invalid(what: str) -> ValueError:
    return ValueError(f"the JSON is not well formed ({what})")


def loads(text: bytes, piece: int = PIECE, slice_bytes: int = SLICE) -> Any:
    """``json.loads(text)``, built by ``json.loads`` calls of at most about ``piece`` values
    each (large arrays and objects are parsed a run of members at a time), so that no single
    call holds the GIL for long. Malformed text: ValueError."""
    data = memoryview(text).cast("B")
    structure = _Structure(data, slice_bytes)
    if len(structure.offsets) <= piece or b"\x00" in text[:4] or text[:3] == b"\xef\xbb\xbf":
        return json.loads(text)  # small, or UTF-16/32 or a BOM (json.loads tells them apart)
    first = int(structure.offsets[0])
    if bytes(data[:first]).strip() or structure.chars[0] not in _OPENS:
        return json.loads(text)  # not a container at the top: json.loads says what is wrong
    value, end = _container(data, structure, 0, piece)
    if bytes(data[int(structure.offsets[end]) + 1:]).strip():
        raise _invalid("text after the top-level value")
    return value


def _close_of(structure: _Structure, i: int) -> int:
    """The index of the entry closing the container opened at entry ``i``."""
    level = int(structure.levels[i]) - 1
    after = np.flatnonzero(structure.levels[i + 1:] == level)
    if not len(after) or structure.chars[i + 1 + after[0]] not in _CLOSES:
        raise _invalid("a bracket is not closed")
    return i + 1 + int(after[0])


def _container(data: memoryview, structure: _Structure, i: int, piece: int) -> tuple[Any, int]:
    """The container opened at entry ``i`` and the index of its closing entry."""
    close = _close_of(structure, i)
    start, stop = int(structure.offsets[i]), int(structure.offsets[close])
    is_list = structure.chars[i] == _OPENS[0]
    if structure.chars[close] != _CLOSES[0 if is_list else 1]:
        raise _invalid("mismatched brackets")
    if close - i <= piece:
        return json.loads(bytes(data[start:stop + 1])), close
    level = int(structure.levels[i])
    inner = slice(i + 1, close)
    commas = i + 1 + np.flatnonzero((structure.levels[inner] == level)
                                    & (structure.chars[inner] == _COMMA))
    bounds = np.concatenate(([i], commas, [close]))  # member k: entries bounds[k]..bounds[k+1]
    out: Any = [] if is_list else {}
    k = 0
    while k < len(bounds) - 1:
        # the longest run of members from k whose entries fit in a piece
        last = int(np.searchsorted(bounds, bounds[k] + piece, side="right")) - 1
        if last == k and not _holds_container(structure, int(bounds[k]), int(bounds[k + 1])):
            last = k + 1  # an object member of a scalar: its ':' alone passed the piece
        if last > k:
            a, b = int(structure.offsets[bounds[k]]) + 1, int(structure.offsets[bounds[last]])
            run = bytes(data[a:b])
            if not run.strip():
                raise _invalid("an empty member")
            if is_list:
                out.extend(json.loads(b"[" + run + b"]"))
            else:
                out.update(json.loads(b"{" + run + b"}"))
            k = last
            continue
        # one member alone is larger than a piece: it holds a container, parsed on its own
        member = _member(data, structure, int(bounds[k]), int(bounds[k + 1]), is_list, piece)
        if is_list:
            out.append(member[1])
        else:
            out[member[0]] = member[1]
        k += 1
    return out, close


def _holds_container(structure: _Structure, lo: int, hi: int) -> bool:
    chars = structure.chars[lo + 1:hi]
    return bool(((chars == _OPENS[0]) | (chars == _OPENS[1])).any())


def _member(data: memoryview, structure: _Structure, lo: int, hi: int, is_list: bool,
            piece: int) -> tuple[Any, Any]:
    """The member between entries ``lo`` and ``hi`` (its separators): (key or None, value)."""
    key: Any = None
    j = lo + 1
    if not is_list:
        if structure.chars[j] != _COLON:
            raise _invalid("an object member without ':'")
        key = json.loads(bytes(data[int(structure.offsets[lo]) + 1:int(structure.offsets[j])]))
        if not isinstance(key, str):
            raise _invalid("an object key that is not a string")
        j += 1
    begin = int(structure.offsets[j - 1]) + 1
    if structure.chars[j] not in _OPENS or bytes(data[begin:int(structure.offsets[j])]).strip():
        raise _invalid("a member that is not one value")
    value, end = _container(data, structure, j, piece)
    if end + 1 != hi or bytes(data[int(structure.offsets[end]) + 1:
                                    int(structure.offsets[hi])]).strip():
        raise _invalid("a member that is not one value")
    return key, value


def to_array(data: list[Any], piece: int = PIECE) -> np.ndarray:
    """``np.array(data)`` built a run of rows at a time (about ``piece`` values each) and
    joined, so that no single call holds the GIL for long; ValueError when ragged."""
    rows = len(data)
    first = data[0] if rows else None
    width = len(first) if isinstance(first, list) and first else 1
    step = max(1, piece // width)
    if rows <= step:
        return np.array(data)
    parts = [np.array(data[i:i + step]) for i in range(0, rows, step)]
    try:
        return np.concatenate(parts)
    except TypeError:  # values of kinds that do not join (strings and numbers): as a whole
        return np.array(data)
