"""The response cache in the data plane: real MLP versions on ONNX Runtime, no mocks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.config import load_config
from edge_agent.config.models import ModelOverrides
from edge_agent.core.cache import ResponseCache
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.errors import ConfigError
from tests.fastpath.conftest import MlpBundles
from tests.support.core_bundles import install, reference_outputs

CACHED = {"mlp": ModelOverrides(response_cache=True)}


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 64)).astype(np.float32)


def _plane(state: Path, bundles: MlpBundles, *, budget: int = 1 << 20,
           overrides: dict[str, ModelOverrides] | None = None) -> DataPlane:
    install(bundles.v1, state)
    install(bundles.v2, state)
    plane = DataPlane(state, overrides=CACHED if overrides is None else overrides,
                      response_cache_bytes=budget)
    plane.repository.set_default("mlp", 1)
    return plane


@pytest.fixture
def plane(tmp_path: Path, mlp_bundles: MlpBundles) -> Iterator[DataPlane]:
    dp = _plane(tmp_path, mlp_bundles)
    try:
        yield dp
    finally:
        dp.close()


def _cache_counts(plane: DataPlane, version: int) -> tuple[int, int]:
    (stats,) = plane.statistics("mlp", version)
    return stats.cache_hit.count, stats.cache_miss.count


def test_a_hit_serves_the_identical_answer_and_is_counted(plane: DataPlane,
                                                           mlp_bundles: MlpBundles) -> None:
    x = _rows(3, seed=7)
    first = plane.infer(InferRequest("mlp", {"input": x}, id="a"))
    executions = plane.statistics("mlp", 1)[0].execution_count
    second = plane.infer(InferRequest("mlp", {"input": x.copy()}, id="b"))
    assert second.id == "b" and second.version == 1
    for name, array in first.outputs.items():
        np.testing.assert_array_equal(second.outputs[name], array)
    expected = reference_outputs(mlp_bundles.v1_onnx, {"input": x})
    for name, array in expected.items():
        np.testing.assert_allclose(second.outputs[name], array, rtol=1e-4, atol=1e-5)
    (stats,) = plane.statistics("mlp", 1)
    assert stats.execution_count == executions  # the hit never reached the model
    assert (stats.cache_hit.count, stats.cache_miss.count) == (1, 1)
    assert stats.cache_hit.ns > 0 and stats.cache_miss.ns > 0


def test_different_inputs_or_requested_outputs_miss(plane: DataPlane) -> None:
    x = _rows(2, seed=1)
    plane.infer(InferRequest("mlp", {"input": x}))
    plane.infer(InferRequest("mlp", {"input": _rows(2, seed=2)}))
    plane.infer(InferRequest("mlp", {"input": x[:1]}))  # same leading bytes, other shape
    out_name = plane.model_metadata("mlp").outputs[0].name
    plane.infer(InferRequest("mlp", {"input": x}, outputs=[out_name]))
    assert _cache_counts(plane, 1) == (0, 4)


def test_a_hot_swap_never_serves_the_old_versions_answer(plane: DataPlane,
                                                         mlp_bundles: MlpBundles) -> None:
    x = _rows(2, seed=3)
    old = plane.infer(InferRequest("mlp", {"input": x}))
    assert plane.infer(InferRequest("mlp", {"input": x})).version == 1
    plane.repository.set_default("mlp", 2)
    new = plane.infer(InferRequest("mlp", {"input": x}))
    assert new.version == 2
    expected = reference_outputs(mlp_bundles.v2_onnx, {"input": x})
    for name, array in expected.items():
        np.testing.assert_allclose(new.outputs[name], array, rtol=1e-4, atol=1e-5)
        assert not np.allclose(new.outputs[name], old.outputs[name])
    assert _cache_counts(plane, 2) == (0, 1)


def test_a_reload_of_the_same_version_starts_from_an_empty_cache(plane: DataPlane) -> None:
    x = _rows(1, seed=4)
    plane.infer(InferRequest("mlp", {"input": x}))
    plane.infer(InferRequest("mlp", {"input": x}))
    plane.repository.reload_version("mlp", 1)
    plane.infer(InferRequest("mlp", {"input": x}))
    hits, misses = _cache_counts(plane, 1)
    assert (hits, misses) == (1, 2)


def test_submit_hits_are_finished_futures(plane: DataPlane) -> None:
    x = _rows(1, seed=5)
    plane.submit(InferRequest("mlp", {"input": x})).result(30)
    future = plane.submit(InferRequest("mlp", {"input": x}))
    assert future.done()
    assert future.result().version == 1
    assert _cache_counts(plane, 1) == (1, 1)


def test_models_without_the_opt_in_are_never_cached(tmp_path: Path,
                                                    mlp_bundles: MlpBundles) -> None:
    dp = _plane(tmp_path, mlp_bundles, overrides={})
    try:
        x = _rows(1, seed=6)
        dp.infer(InferRequest("mlp", {"input": x}))
        dp.infer(InferRequest("mlp", {"input": x}))
        assert _cache_counts(dp, 1) == (0, 0)
        assert dp.response_cache is not None and len(dp.response_cache) == 0
    finally:
        dp.close()


def test_the_byte_budget_is_respected_least_recently_used_first(
        tmp_path: Path, mlp_bundles: MlpBundles) -> None:
    probe = _plane(tmp_path / "probe", mlp_bundles, budget=1 << 20)
    try:
        probe.infer(InferRequest("mlp", {"input": _rows(1, seed=0)}))
        assert probe.response_cache is not None
        entry = probe.response_cache.used_bytes
    finally:
        probe.close()
    dp = _plane(tmp_path / "small", mlp_bundles, budget=3 * entry)  # room for three answers
    try:
        cache = dp.response_cache
        assert cache is not None
        xs = [_rows(1, seed=s) for s in range(10, 15)]
        for x in xs:
            dp.infer(InferRequest("mlp", {"input": x}))
            assert cache.used_bytes <= cache.max_bytes
        assert len(cache) == 3
        dp.infer(InferRequest("mlp", {"input": xs[-1]}))  # newest: still held
        dp.infer(InferRequest("mlp", {"input": xs[0]}))  # oldest: evicted
        assert _cache_counts(dp, 1) == (1, 6)
    finally:
        dp.close()


def test_an_answer_larger_than_the_budget_is_not_stored() -> None:
    cache = ResponseCache(100)
    assert not cache.put(b"k" * 32, {"y": np.zeros(1000, np.float32)})
    assert len(cache) == 0 and cache.used_bytes == 0


def test_cached_arrays_are_read_only_copies() -> None:
    cache = ResponseCache(1 << 20)
    source = np.arange(4, dtype=np.float32)
    cache.put(b"k", {"y": source})
    source[0] = 99
    held = cache.get(b"k")
    assert held is not None and held["y"][0] == 0 and not held["y"].flags.writeable


def test_config_keys(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text('[response_cache]\nsize_mib = 2\n[models.mlp]\nresponse_cache = true\n')
    config = load_config(toml, state_dir=tmp_path)
    assert config.models.response_cache_bytes == 2 << 20
    assert config.models.overrides["mlp"].response_cache is True
    toml.write_text('[response_cache]\nsize_mb = 2\n')
    with pytest.raises(ConfigError, match=r"response_cache\.size_mb"):
        load_config(toml, state_dir=tmp_path)
    toml.write_text('[response_cache]\nsize_mib = -1\n')
    with pytest.raises(ConfigError, match="size_mib"):
        load_config(toml, state_dir=tmp_path)
