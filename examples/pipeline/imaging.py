"""A tiny "JPEG-ish" image format, numpy and zlib only: what a camera would send compressed.

An image is ``b"EPI1"``, height and width (uint16, little-endian), then the zlib-compressed
8-bit grey pixels. :func:`encode` is the camera's side, :func:`decode` the model's.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

MAGIC = b"EPI1"
_HEAD = struct.Struct("<4sHH")


def encode(pixels: np.ndarray) -> bytes:
    """A 2-D uint8 array as an EPI image."""
    h, w = pixels.shape
    return _HEAD.pack(MAGIC, h, w) + zlib.compress(np.ascontiguousarray(pixels, np.uint8))


def decode(data: bytes) -> np.ndarray:
    """The 2-D uint8 pixels of an EPI image; ValueError for anything else."""
    if len(data) < _HEAD.size:
        raise ValueError(f"an EPI image has at least {_HEAD.size} bytes, got {len(data)}")
    magic, h, w = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"not an EPI image (magic {magic!r})")
    raw = zlib.decompress(data[_HEAD.size:])
    if len(raw) != h * w:
        raise ValueError(f"EPI image says {h}x{w} but holds {len(raw)} pixels")
    return np.frombuffer(raw, np.uint8).reshape(h, w)


def resize(pixels: np.ndarray, size: int) -> np.ndarray:
    """``pixels`` resized to ``size`` x ``size`` (each output pixel the mean of the 2x2 source
    pixels nearest its centre), float32; vectorised, no Python loop per pixel."""
    h, w = pixels.shape
    rows = ((np.arange(size) + 0.5) * h / size).astype(int)
    cols = ((np.arange(size) + 0.5) * w / size).astype(int)
    r0, c0 = np.maximum(rows - 1, 0), np.maximum(cols - 1, 0)
    p = pixels.astype(np.float32)
    return (p[np.ix_(rows, cols)] + p[np.ix_(r0, cols)] + p[np.ix_(rows, c0)]
            + p[np.ix_(r0, c0)]) / 4
