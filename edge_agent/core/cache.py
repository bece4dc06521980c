"""The response cache: answers to repeated requests served without running the model.

Triton's response cache is the model: opt-in per model (``[models.NAME] response_cache =
true``), one agent-wide byte budget (``[response_cache] size_mib``), least recently used
entries evicted first. The key is a 256-bit BLAKE2b digest of the model name, the identity of
the loaded model version the request was routed to (its version number and a token unique to
that load, so a hot swap, a rollback or a reload of the same number never serves another
load's answer), every input's name, datatype, shape and bytes, and the requested outputs.
A model whose answer depends on other models (a pipeline, a Python model that may call
``ctx.infer``) is also keyed by the repository's routing generation, which every switch of what
serves a model advances: a member rolled back from v2 to v1 is never answered for by v2's
entries, and those entries are dropped when the next such key sees the new generation.

Statistics follow Triton's ``cache_hit``/``cache_miss``: a hit's duration is its lookup; a
miss's is its lookup plus, when the answer comes, its insertion. Thread-safe.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from edge_agent.core.types import DurationStat

ENTRY_OVERHEAD_BYTES = 330
"""Bytes charged per entry beyond the sizes of its own objects (its key, its dict, its arrays):
the LRU map's slot and link (105 to 150 bytes measured with tracemalloc on CPython 3.11 as
its table grows), the entry's tuple (64) and its size (28), and the allocators' slack that RSS
shows and tracemalloc does not (~90 bytes: ``python -m benchmarks.bench_cache_memory``)."""
ARRAY_OVERHEAD_BYTES = 16
"""Charged per array on top of ``sys.getsizeof`` (its header, shape and owned data): malloc's
header on the data buffer, which tracemalloc does not see but RSS does."""

_Outputs = dict[str, np.ndarray]


@dataclass(slots=True)
class CacheStats:
    """Hits and misses of one model version (Triton's cache_hit / cache_miss)."""

    hit: DurationStat = field(default_factory=DurationStat)
    miss: DurationStat = field(default_factory=DurationStat)


def _array_bytes(array: np.ndarray) -> int:
    """The memory ``array`` (a private copy owning its data) holds: the object and its data,
    and for BYTES tensors the element objects it keeps alive."""
    size = sys.getsizeof(array) + ARRAY_OVERHEAD_BYTES
    if array.dtype == object:  # BYTES tensors: the elements are objects of their own
        size += int(sum(sys.getsizeof(v) for v in array.ravel()))
    return size


def _entry_bytes(key: bytes, outputs: _Outputs) -> int:
    """What one entry costs in memory (measured against tracemalloc: tests/unit/test_cache.py);
    output names are the model's own strings, shared, and not charged."""
    return (ENTRY_OVERHEAD_BYTES + sys.getsizeof(key) + sys.getsizeof(outputs)
            + sum(_array_bytes(a) for a in outputs.values()))


def _frozen_copy(array: np.ndarray) -> np.ndarray:
    """A private, read-only copy: a cached answer never shares memory with a batch buffer and
    no caller can change it for the next one."""
    out = np.array(array, copy=True, order="C")
    out.flags.writeable = False
    return out


class ResponseCache:
    """An LRU map from request digests to output arrays, within ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"response cache budget must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, tuple[_Outputs, int, int | None]] = OrderedDict()
        self._bytes = 0
        self._routing = 0  # the newest routing generation a key was made with
        self._stats: dict[tuple[str, int], CacheStats] = {}
        self._tokens: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._next_token = itertools.count(1)

    # -- keys --------------------------------------------------------------------------
    def _token(self, loaded: object) -> int:
        with self._lock:
            token = self._tokens.get(loaded)
            if token is None:
                token = self._tokens[loaded] = next(self._next_token)
            return token

    def key(self, loaded: object, model: str, version: int, inputs: Mapping[str, np.ndarray],
            outputs: Sequence[str] | None, routing: int | None = None) -> bytes:
        """The digest of a request routed to ``loaded`` (the object serving that load of
        ``model`` ``version``, e.g. its batcher); ``routing``: the routing generation, for a
        model whose answer depends on what serves other models (None otherwise)."""
        if routing is not None:
            self._advance(routing)
        h = hashlib.blake2b(digest_size=32)
        h.update(f"{model}\0{version}\0{self._token(loaded)}\0{routing}\0".encode())
        for name in sorted(inputs):
            array = inputs[name]
            h.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
            if array.dtype == object:
                for value in array.ravel():
                    data = value if isinstance(value, bytes) else str(value).encode()
                    h.update(len(data).to_bytes(8, "little"))
                    h.update(data)
            else:
                h.update(np.ascontiguousarray(array).data)
        h.update(b"\1" if outputs is None else "\0".join(outputs).encode())
        return h.digest()

    def _advance(self, routing: int) -> None:
        """Drop the entries keyed by an older routing generation than ``routing``."""
        with self._lock:
            if routing <= self._routing:
                return
            self._routing = routing
            stale = [k for k, (_, _, r) in self._entries.items() if r is not None and r < routing]
            for k in stale:
                self._bytes -= self._entries.pop(k)[1]

    # -- lookups and inserts -----------------------------------------------------------
    def get(self, key: bytes) -> _Outputs | None:
        """The cached outputs (read-only arrays, a fresh dict) or None; a hit becomes the most
        recently used entry."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return dict(entry[0])

    def put(self, key: bytes, outputs: Mapping[str, np.ndarray],
            routing: int | None = None) -> bool:
        """Store a copy of ``outputs``, evicting least recently used entries to stay within
        the budget; False when the answer alone exceeds it (it is not stored). ``routing``:
        the generation ``key`` was made with (an older one than the newest: not stored)."""
        if sum(a.nbytes for a in outputs.values()) > self.max_bytes:
            return False  # too big whatever its overhead: not even copied
        frozen = {name: _frozen_copy(a) for name, a in outputs.items()}
        size = _entry_bytes(key, frozen)
        if size > self.max_bytes:
            return False
        with self._lock:
            if routing is not None and routing < self._routing:
                return False  # routed before a switch: its answer may be the old member's
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            while self._entries and self._bytes + size > self.max_bytes:
                _, (_, evicted, _) = self._entries.popitem(last=False)
                self._bytes -= evicted
            self._entries[key] = (frozen, size, routing)
            self._bytes += size
        return True

    # -- statistics --------------------------------------------------------------------
    def record(self, model: str, version: int, *, hit: bool, ns: int) -> None:
        """Count one hit or one miss of ``model`` ``version`` taking ``ns``."""
        with self._lock:
            stats = self._stats.get((model, version))
            if stats is None:
                stats = self._stats[(model, version)] = CacheStats()
            (stats.hit if hit else stats.miss).add(ns)

    def add_miss_time(self, model: str, version: int, ns: int) -> None:
        """Add ``ns`` (an insertion) to the duration of the misses, not to their count."""
        with self._lock:
            stats = self._stats.get((model, version))
            if stats is not None:
                stats.miss.ns += ns

    def stats(self, model: str, version: int) -> CacheStats:
        """A copy of the hit/miss counters of ``model`` ``version`` (zeros if never used)."""
        with self._lock:
            stats = self._stats.get((model, version))
            if stats is None:
                return CacheStats()
            return CacheStats(DurationStat(stats.hit.count, stats.hit.ns),
                              DurationStat(stats.miss.count, stats.miss.ns))

    @property
    def used_bytes(self) -> int:
        """Bytes charged for the entries held now (never above ``max_bytes``)."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
