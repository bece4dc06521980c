"""Fixed log-spaced latency buckets: cheap to fill on the hot path, mergeable, compact on disk.

A duration in nanoseconds falls in a bucket found with integer operations only: the octave from
``int.bit_length()`` and two more bits for four sub-buckets per octave (each bucket spans at most
25% of its lower bound, so an interpolated percentile is within ~12% of the truth). Bucket 0 holds
everything under 1.024 µs; the last bucket holds everything from ~60 s up.
"""

from __future__ import annotations

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


def encode(counts: Sequence[int]) -> bytes:
    """Sparse form of the non-empty buckets: ``index`` (one byte) then ``count`` (LEB128 varint).

    Self-delimiting, so concatenated encodings decode to the sum of the histograms.
    """
    out = bytearray()
    for i, c in enumerate(counts):
        if c > 0:
            out.append(i)
            while c >= 0x80:
                out.append((c & 0x7F) | 0x80)
                c >>= 7
            out.append(c)
    return bytes(out)


def decode(blob: bytes | None) -> list[int]:
    """The histogram stored by :func:`encode` (or the sum of several concatenated ones)."""
    counts = new_counts()
    if not blob:
        return counts
    pos, end = 0, len(blob)
    while pos < end:
        i = blob[pos]
        c = shift = 0
        pos += 1
        while True:
            byte = blob[pos]
            pos += 1
            c |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        if i < NUM_BUCKETS:
            counts[i] += c
    return counts


def merged(blobs: Iterable[bytes | None]) -> list[int]:
    """Sum of several encoded histograms."""
    return decode(b"".join(b for b in blobs if b))


def buckets_of(ns: np.ndarray) -> np.ndarray:
    """Vectorized :func:`bucket_of` for an int64 array of nanosecond durations."""
    ns = np.asarray(ns, dtype=np.int64)
    mantissa, exp = np.frexp(ns.astype(np.float64))  # ns = m * 2**e, 0.5 <= m < 1: e = bit_length
    sub = ((mantissa * 2.0 - 1.0) * SUBS).astype(np.int64)
    idx = ((exp.astype(np.int64) - MIN_BITS) << SUB_BITS) + sub + 1
    idx = np.where(exp > MAX_BITS, NUM_BUCKETS - 1, idx)
    return np.where(ns < (1 << (MIN_BITS - 1)), 0, idx)
