"""Turn the recorder's per-key int64 buffers into per model version :class:`SecondRow` s.

The hot path appends five int64 values per request (ok, rows, queue_ns, compute_ns, total_ns) and
one per batch (its size) to ``array('q')`` buffers, one per model version: no Python objects are
kept alive, so the garbage collector never sees them. The writer thread copies the buffers once
a second and sums them here with numpy.
"""

from __future__ import annotations

import logging
from array import array

import numpy as np

from edge_agent.metrics import histogram as hist
from edge_agent.metrics.store import SecondRow

log = logging.getLogger(__name__)

REQUEST_FIELDS = 5  # ok, rows, queue_ns, compute_ns, total_ns
CACHE_HIT = 2
"""The ``ok`` value of a request answered from the response cache (0: failed, 1: ran)."""


def _hist(values: np.ndarray) -> list[int]:
    counts: list[int] = np.bincount(hist.buckets_of(values), minlength=hist.NUM_BUCKETS).tolist()
    return counts


def aggregate(requests: dict[tuple[str, int], list[array[int]]],
              batches: dict[tuple[str, int], list[array[int]]]) -> list[SecondRow]:
    """One row per model version, sorted by key, from copied request and batch buffers."""
    rows = []
    for key in sorted(set(requests) | set(batches)):
        model, version = key
        chunks = [c for c in requests.get(key, ()) if len(c)]
        data = np.frombuffer(b"".join(c.tobytes() for c in chunks), dtype=np.int64)
        if len(data) % REQUEST_FIELDS:
            log.warning("model %r version %d: dropped %d metrics values of one second "
                        "(a non-integer duration was reported)", model, version, len(data))
            data = data[:0]
        req = data.reshape(-1, REQUEST_FIELDS)
        sizes = np.frombuffer(b"".join(c.tobytes() for c in batches.get(key, ())),
                              dtype=np.int64)
        sums = req.sum(axis=0).tolist() if len(req) else [0] * REQUEST_FIELDS
        rows.append(SecondRow(
            model, version, requests=len(req), errors=int(np.count_nonzero(req[:, 0] == 0)),
            rows=sums[1], batches=len(sizes), batch_rows=int(sizes.sum()),
            queue_ns_sum=sums[2], compute_ns_sum=sums[3], total_ns_sum=sums[4],
            cache_hits=int(np.count_nonzero(req[:, 0] == CACHE_HIT)),
            h_queue=_hist(req[:, 2]), h_compute=_hist(req[:, 3]), h_total=_hist(req[:, 4])))
    return rows
