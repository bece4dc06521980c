"""Turn buffered per-request records into per model version :class:`SecondRow` s, vectorized.

The recorder's hot path only appends a tuple to a deque; the writer thread drains it once a
second and aggregates here with numpy (about 0.3 µs per request, off the serving threads).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edge_agent.metrics import histogram as hist
from edge_agent.metrics.store import SecondRow

#: (model, version, ok, rows, queue_ns, compute_ns, total_ns)
RequestRecord = tuple[str, int, bool, int, int, int, int]
#: (model, version, batch_size, compute_ns)
BatchRecord = tuple[str, int, int, int]


def _index(pairs: list[tuple[str, int]], order: dict[tuple[str, int], int]) -> np.ndarray:
    if len(order) == 1:
        return np.zeros(len(pairs), dtype=np.int64)
    return np.fromiter(map(order.__getitem__, pairs), dtype=np.int64, count=len(pairs))


def _sums(idx: np.ndarray, values: Sequence[int], k: int) -> list[int]:
    weights = np.fromiter(values, dtype=np.float64, count=len(values))  # exact below 2**53
    return [int(v) for v in np.rint(np.bincount(idx, weights=weights, minlength=k))]


def _hists(idx: np.ndarray, values: Sequence[int], k: int) -> list[list[int]]:
    buckets = hist.buckets_of(np.fromiter(values, dtype=np.int64, count=len(values)))
    flat = np.bincount(idx * hist.NUM_BUCKETS + buckets, minlength=k * hist.NUM_BUCKETS)
    return flat.reshape(k, hist.NUM_BUCKETS).tolist()


def aggregate(requests: Sequence[RequestRecord],
              batches: Sequence[BatchRecord]) -> list[SecondRow]:
    """One row per model version found in ``requests`` or ``batches``, sorted by key."""
    req_pairs = [(r[0], r[1]) for r in requests]
    bat_pairs = [(b[0], b[1]) for b in batches]
    keys = sorted(set(req_pairs) | set(bat_pairs))
    if not keys:
        return []
    order = {key: i for i, key in enumerate(keys)}
    k = len(keys)
    zeros, empty = [0] * k, [hist.new_counts() for _ in range(k)]
    if requests:
        _, _, oks, rows, qs, cs, ts = zip(*requests, strict=True)
        idx = _index(req_pairs, order)
        n_req = np.bincount(idx, minlength=k).tolist()
        ok = np.fromiter(oks, dtype=bool, count=len(oks))
        n_err = np.bincount(idx[~ok], minlength=k).tolist()
        n_rows, q_sum, c_sum, t_sum = (_sums(idx, v, k) for v in (rows, qs, cs, ts))
        hq, hc, ht = (_hists(idx, v, k) for v in (qs, cs, ts))
    else:
        n_req = n_err = n_rows = q_sum = c_sum = t_sum = zeros
        hq, hc, ht = empty, [list(h) for h in empty], [list(h) for h in empty]
    if batches:
        bidx = _index(bat_pairs, order)
        n_bat = np.bincount(bidx, minlength=k).tolist()
        bat_rows = _sums(bidx, [b[2] for b in batches], k)
    else:
        n_bat = bat_rows = zeros
    return [SecondRow(model, version, n_req[i], n_err[i], n_rows[i], n_bat[i], bat_rows[i],
                      q_sum[i], c_sum[i], t_sum[i], hq[i], hc[i], ht[i])
            for i, (model, version) in enumerate(keys)]
