"""Per-model settings over a manifest's batching, and version policies."""

from __future__ import annotations

import pytest

from edge_agent.core.overrides import (
    DEFAULT_MAX_QUEUE_SIZE,
    ModelOverrides,
    effective_batching,
    parse_version_policy,
    policy_versions,
)
from packager.bundle.manifest import BatchingConfig

MANIFEST = BatchingConfig(max_batch_size=16, preferred_batch_sizes=(4, 8, 16),
                          max_queue_delay_us=500, instances=2, threads=1)


def test_no_overrides_keeps_the_manifest_and_fills_the_queue_default() -> None:
    b = effective_batching(MANIFEST, None)
    assert (b.max_batch_size, b.preferred_batch_sizes, b.instances) == (16, (4, 8, 16), 2)
    assert b.max_queue_size == DEFAULT_MAX_QUEUE_SIZE


def test_a_smaller_max_batch_drops_preferred_sizes_above_it() -> None:
    b = effective_batching(MANIFEST, ModelOverrides(max_batch_size=6))
    assert b.max_batch_size == 6 and b.preferred_batch_sizes == (4,)


def test_max_batch_can_only_shrink_what_the_model_was_built_for() -> None:
    assert effective_batching(MANIFEST, ModelOverrides(max_batch_size=64)).max_batch_size == 16
    unbatched = BatchingConfig(max_batch_size=0)
    assert effective_batching(unbatched, ModelOverrides(max_batch_size=8)).max_batch_size == 0


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
