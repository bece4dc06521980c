"""Fixed log-spaced latency buckets: cheap to fill on the hot path, mergeable, compact on disk.

A duration in nanoseconds falls in a bucket found with integer operations only: the octave from
``int.bit_length()`` and two more bits for four sub-buckets per octave (each bucket spans at most
25% of its lower bound, so an interpolated percentile is within ~12% of the truth). Bucket 0 holds
everything under 1.024 µs; the last bucket holds everything from ~60 s up.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import numpy as np

SUB_BITS = 2
SUBS = 1 << SUB_BITS  # sub-buckets per octave
MIN_BITS = 11  # durations with bit_length < 11 (< 1024 ns) go to bucket 0
MAX_BITS = 36  # up to 2**36 ns ~ 69 s; longer durations go to the last bucket
NUM_BUCKETS = 1 + (MAX_BITS - MIN_BITS + 1) * SUBS


def bucket_of(ns: int) -> int:
    """The bucket index of a duration in nanoseconds (the recorder inlines this arithmetic)."""
    if ns < (1 << (MIN_BITS - 1)):  # also negative durations (clock steps)
        return 0
    b = ns.bit_length()
    if b > MAX_BITS:
        return NUM_BUCKETS - 1
    return ((b - MIN_BITS) << SUB_BITS) + ((ns >> (b - 1 - SUB_BITS)) & (SUBS - 1)) + 1


def bucket_bounds(index: int) -> tuple[float, float]:
    """The ``[lower, upper)`` nanosecond range of a bucket."""
    if index <= 0:
        return 0.0, float(1 << (MIN_BITS - 1))
    b = (index - 1) // SUBS + MIN_BITS
    sub = (index - 1) % SUBS
    base = float(1 << (b - 1))
    return base * (1 + sub / SUBS), base * (1 + (sub + 1) / SUBS)


def new_counts() -> list[int]:
    """An empty histogram."""
    return [0] * NUM_BUCKETS


def merge_into(target: list[int], counts: Sequence[int]) -> None:
    """Add ``counts`` into ``target`` in place."""
    for i, c in enumerate(counts):
        if c:
            target[i] += c


def percentile(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) in nanoseconds, interpolated within its bucket; None if empty."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            lo, hi = bucket_bounds(i)
            return lo + (hi - lo) * max(0.0, rank - seen) / c
        seen += c
    lo, hi = bucket_bounds(NUM_BUCKETS - 1)
    return hi


_PAIR = struct.Struct("<HI")


def encode(counts: Sequence[int]) -> bytes:
    """Sparse little-endian ``(uint16 index, uint32 count)`` pairs of the non-empty buckets."""
    return b"".join(_PAIR.pack(i, min(c, 0xFFFFFFFF)) for i, c in enumerate(counts) if c)


def decode(blob: bytes | None) -> list[int]:
    """The histogram stored by :func:`encode`."""
    counts = new_counts()
    if blob:
        for i, c in _PAIR.iter_unpack(blob):
            if i < NUM_BUCKETS:
                counts[i] += c
    return counts


def merged(blobs: Iterable[bytes | None]) -> list[int]:
    """Sum of several encoded histograms."""
    counts = new_counts()
    for blob in blobs:
        if blob:
            for i, c in _PAIR.iter_unpack(blob):
                if i < NUM_BUCKETS:
                    counts[i] += c
    return counts


def buckets_of(ns: np.ndarray) -> np.ndarray:
    """Vectorized :func:`bucket_of` for an int64 array of nanosecond durations."""
    ns = np.asarray(ns, dtype=np.int64)
    mantissa, exp = np.frexp(ns.astype(np.float64))  # ns = m * 2**e, 0.5 <= m < 1: e = bit_length
    sub = ((mantissa * 2.0 - 1.0) * SUBS).astype(np.int64)
    idx = ((exp.astype(np.int64) - MIN_BITS) << SUB_BITS) + sub + 1
    idx = np.where(exp > MAX_BITS, NUM_BUCKETS - 1, idx)
    return np.where(ns < (1 << (MIN_BITS - 1)), 0, idx)
