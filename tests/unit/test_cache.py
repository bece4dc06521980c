"""The response cache: keys per loaded version and request, LRU eviction within a budget."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.core.cache import ResponseCache

X = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}


class Load:
    """Stands for the object serving one load of a version (the batcher, in the agent)."""


def out(n: int) -> dict[str, np.ndarray]:
    return {"y": np.zeros(n, np.uint8)}


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="budget must be >= 0"):
        ResponseCache(-1)


def test_keys_differ_by_version_load_inputs_and_outputs() -> None:
    cache = ResponseCache(1 << 20)
    load, reload = Load(), Load()
    base = cache.key(load, "m", 1, X, None)
    assert base == cache.key(load, "m", 1, {"x": X["x"].copy()}, None)
    others = [cache.key(load, "m", 2, X, None), cache.key(reload, "m", 1, X, None),
              cache.key(load, "m", 1, {"x": X["x"] + 1}, None),
              cache.key(load, "m", 1, {"x": X["x"].astype(np.float64)}, None),
              cache.key(load, "m", 1, X, ["y"])]
    assert base not in others and len(set(others)) == len(others)


def test_a_hit_returns_read_only_copies() -> None:
    cache = ResponseCache(1 << 20)
    answer = {"y": np.ones(3, np.float32)}
    assert cache.put(b"k", answer)
    answer["y"][0] = 7  # the caller's array changing later does not change the entry
    got = cache.get(b"k")
    assert got is not None and got["y"].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        got["y"][0] = 2


def test_the_least_recently_used_entry_is_evicted_first() -> None:
    probe = ResponseCache(1 << 20)
    probe.put(b"a", out(1000))
    entry = probe.used_bytes
    cache = ResponseCache(entry * 2 + entry // 2)  # room for two entries
    cache.put(b"a", out(1000))
    cache.put(b"b", out(1000))
    assert cache.get(b"a") is not None  # a is now the most recent
    cache.put(b"c", out(1000))
    assert cache.get(b"b") is None and cache.get(b"a") is not None
    assert len(cache) == 2 and cache.used_bytes <= cache.max_bytes


def test_an_answer_larger_than_the_budget_is_not_stored() -> None:
    cache = ResponseCache(100)
    assert not cache.put(b"k", out(1000))
    assert cache.get(b"k") is None and len(cache) == 0


def test_hits_and_misses_are_counted_per_version() -> None:
    cache = ResponseCache(1 << 20)
    cache.record("m", 1, hit=True, ns=10)
    cache.record("m", 1, hit=False, ns=30)
    cache.record("m", 2, hit=True, ns=5)
    one = cache.stats("m", 1)
    assert (one.hit.count, one.hit.ns, one.miss.count, one.miss.ns) == (1, 10, 1, 30)
    assert cache.stats("m", 2).hit.count == 1 and cache.stats("m", 2).miss.count == 0


def test_a_model_calling_others_is_keyed_by_the_routing_generation() -> None:
    cache = ResponseCache(1 << 20)
    load = Load()
    before = cache.key(load, "pipe", 1, X, None, routing=3)
    assert cache.put(before, out(10), 3) and cache.put(b"plain", out(10))
    after = cache.key(load, "pipe", 1, X, None, routing=4)  # a member switched
    assert after != before
    assert cache.get(before) is None, "entries of an older routing generation are dropped"
    assert cache.get(b"plain") is not None  # a model calling no other keeps its entries
    assert not cache.put(before, out(10), 3), "routed before the switch: not stored"
    assert cache.put(after, out(10), 4) and cache.get(after) is not None
