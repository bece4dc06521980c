"""Per-model settings over a manifest's batching, and version policies."""

from __future__ import annotations

import pytest

from edge_agent.core.overrides import (
    DEFAULT_MAX_QUEUE_SIZE,
    ModelOverrides,
    batch_ceiling,
    effective_batching,
    max_batch_problem,
    parse_version_policy,
    policy_versions,
)
from packager.bundle.manifest import BatchingConfig, Manifest, TensorSpec

MANIFEST = BatchingConfig(max_batch_size=16, preferred_batch_sizes=(4, 8, 16),
                          max_queue_delay_us=500, instances=2, threads=1)


def test_no_overrides_keeps_the_manifest_and_fills_the_queue_default() -> None:
    b = effective_batching(MANIFEST, None)
    assert (b.max_batch_size, b.preferred_batch_sizes, b.instances) == (16, (4, 8, 16), 2)
    assert b.max_queue_size == DEFAULT_MAX_QUEUE_SIZE


def test_a_smaller_max_batch_drops_preferred_sizes_above_it() -> None:
    b = effective_batching(MANIFEST, ModelOverrides(max_batch_size=6))
    assert b.max_batch_size == 6 and b.preferred_batch_sizes == (4,)


def test_max_batch_goes_as_high_as_the_batch_dimension_allows() -> None:
    assert effective_batching(MANIFEST, ModelOverrides(max_batch_size=64)).max_batch_size == 64
    assert effective_batching(MANIFEST, ModelOverrides(max_batch_size=64),
                              ceiling=24).max_batch_size == 24
    unbatched = BatchingConfig(max_batch_size=0)
    assert effective_batching(unbatched, ModelOverrides(max_batch_size=8),
                              ceiling=0).max_batch_size == 0


def _manifest(batch_dim: int, max_batch: int, **options: dict[str, object]) -> Manifest:
    t = TensorSpec("x", "FP32", (batch_dim, 4))
    return Manifest(name="m", version=1, profile="", arch="", backend="onnxruntime",
                    precision="fp32", inputs=(t,), outputs=(t,),
                    batching=BatchingConfig(max_batch_size=max_batch), artifacts={},
                    backend_options=dict(options))


def test_the_batch_ceiling_comes_from_the_artifact() -> None:
    assert batch_ceiling(_manifest(-1, 8)) is None  # dynamic dim 0: any size
    assert batch_ceiling(_manifest(8, 4)) == 8
    assert batch_ceiling(_manifest(-1, 8, tensorrt={"max_batch": 8})) == 8  # the engine's
    assert batch_ceiling(_manifest(4, 0)) == 0
    assert max_batch_problem(_manifest(-1, 8), 1024) is None
    assert max_batch_problem(_manifest(8, 4), 8) is None
    assert "at most 8" in str(max_batch_problem(_manifest(8, 4), 9))
    assert "at least 1" in str(max_batch_problem(_manifest(-1, 8), 0))
    assert "no batch dimension" in str(max_batch_problem(_manifest(4, 0), 2))
    assert max_batch_problem(_manifest(4, 0), 0) is None


def test_out_of_range_values_are_clamped() -> None:
    b = effective_batching(MANIFEST, ModelOverrides(instances=0, threads=-3,
                                                    max_queue_delay_us=-1,
                                                    preferred_batch_sizes=(0, 3, 3, 99)))
    assert (b.instances, b.threads, b.max_queue_delay_us) == (1, 0, 0)
    assert b.preferred_batch_sizes == (3,)


@pytest.mark.parametrize(("policy", "parsed"), [
    ("active", ("active", ())), ("all", ("all", ())), ("latest 2", ("latest", (2,))),
    ("specific 1,3", ("specific", (1, 3))), (" specific 4 5 ", ("specific", (4, 5))),
])
def test_version_policies_parse(policy: str, parsed: tuple[str, tuple[int, ...]]) -> None:
    assert parse_version_policy(policy) == parsed


@pytest.mark.parametrize("policy", ["latest 0", "latest", "latest x", "specific", "newest",
                                    "all 3", "specific 1,b"])
def test_bad_version_policies_name_the_accepted_forms(policy: str) -> None:
    with pytest.raises(ValueError, match='"latest N"'):
        parse_version_policy(policy)


@pytest.mark.parametrize(("policy", "active", "chosen"), [
    ("all", None, [1, 2, 5]), ("latest 2", None, [2, 5]), ("specific 2,7", None, [2]),
    ("active", 2, [2]), ("active", None, [5]), ("active", 9, []),
])
def test_policies_select_versions_on_disk(policy: str, active: int | None,
                                          chosen: list[int]) -> None:
    assert policy_versions(policy, [5, 1, 2], active) == chosen
