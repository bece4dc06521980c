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
    """Area-average ``pixels`` down (or nearest-neighbour up) to ``size`` x ``size``, float32."""
    h, w = pixels.shape
    rows = np.linspace(0, h, size + 1).astype(int)
    cols = np.linspace(0, w, size + 1).astype(int)
    out = np.empty((size, size), np.float32)
    for i in range(size):
        for j in range(size):
            block = pixels[rows[i]:max(rows[i + 1], rows[i] + 1),
                           cols[j]:max(cols[j + 1], cols[j] + 1)]
            out[i, j] = block.mean()
    return out
