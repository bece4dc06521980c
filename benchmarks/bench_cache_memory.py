"""The response cache's real memory against its budget, for small answers (issue 27).

    python -m benchmarks.bench_cache_memory                 # 200,000 entries of each kind
    python -m benchmarks.bench_cache_memory --entries 50000

Fills a :class:`~edge_agent.core.cache.ResponseCache` with a budget larger than everything
(nothing evicted), one answer kind at a time in a fresh process, and prints per entry the RSS
it took, the bytes it charged against its budget and their ratio (target <= 1.0: the budget
holds in real memory).
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KINDS = ("fp32x4", "int64x1", "bytes3+fp32x3", "fp32x1024")


def _answer(kind: str, i: int) -> dict[str, np.ndarray]:
    if kind == "fp32x4":
        return {"y": np.full(4, i, np.float32)}
    if kind == "int64x1":
        return {"y": np.array([i], np.int64)}
    if kind == "bytes3+fp32x3":
        return {"LABELS": np.array([b"cat%d" % i, b"dog", b"bird"], dtype=object),
                "SCORES": np.full(3, i, np.float32)}
    return {"y": np.full(1024, i, np.float32)}


class _Load:
    """Stands for the object serving one load (the batcher, in the agent)."""


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _measure(kind: str, entries: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from edge_agent.core.cache import ResponseCache

    cache = ResponseCache(1 << 40)
    load = _Load()
    inputs = [{"x": np.array([i], np.float32)} for i in range(entries)]
    gc.collect()
    before = _rss()
    for i, x in enumerate(inputs):
        cache.put(cache.key(load, "m", 1, x, None), _answer(kind, i))
    gc.collect()
    out.put((kind, (_rss() - before) / entries, cache.used_bytes / entries))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    args = parser.parse_args(argv)
    ctx = mp.get_context("spawn")
    print(f"{'answer':<16}{'RSS/entry':>12}{'charged/entry':>16}{'RSS/charged':>14}")
    for kind in KINDS:
        queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
        proc = ctx.Process(target=_measure, args=(kind, args.entries, queue))
        proc.start()
        name, rss, charged = queue.get(timeout=600)
        proc.join()
        print(f"{name:<16}{rss:>10.0f} B{charged:>14.0f} B{rss / charged:>13.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
