"""The budget's accounting and choice of what to unload (edge_agent.core.residency)."""

from __future__ import annotations

import pytest

from edge_agent.core.residency import MIB, MemoryBudgetError, Resident, check_fits, idle, victims


def _r(name: str, mib: int, used: float, **kw: bool) -> Resident:
    return Resident(name, 1, mib * MIB, used, **kw)


def test_victims_are_least_recently_used_first_and_only_as_many_as_needed() -> None:
    residents = [_r("a", 40, 3.0), _r("b", 40, 1.0), _r("c", 40, 2.0)]
    assert [r.name for r in victims(60 * MIB, 130 * MIB, residents)] == ["b", "c"]
    assert [r.name for r in victims(50 * MIB, 130 * MIB, residents)] == ["b"]
    assert victims(10 * MIB, 130 * MIB, residents) == []


def test_pinned_and_busy_versions_are_never_chosen_and_the_refusal_gives_figures() -> None:
    residents = [_r("safety", 60, 0.0, pinned=True), _r("swap", 30, 0.5, evictable=False),
                 _r("idle", 20, 1.0)]
    assert [r.name for r in victims(20 * MIB, 110 * MIB, residents)] == ["idle"]
    with pytest.raises(MemoryBudgetError) as err:
        victims(50 * MIB, 110 * MIB, residents)
    text = str(err.value)
    assert "needs 50.0 MiB" in text and "memory budget is 110.0 MiB" in text
    assert "pinned: safety v1 60.0 MiB" in text and "swap v1 30.0 MiB" in text


def test_a_hot_swap_counts_the_old_and_the_new_version() -> None:
    old = Resident("cnn", 1, 60 * MIB, 1.0)
    check_fits(60 * MIB, 100 * MIB, [old], name="cnn", version=2)  # alone it fits
    with pytest.raises(MemoryBudgetError) as err:
        check_fits(60 * MIB, 100 * MIB, [old], name="cnn", version=2, swap_from=old)
    assert "hot swap of cnn" in str(err.value) and "loaded at once" in str(err.value)
    check_fits(10**12, None, [old], name="cnn", version=2, swap_from=old)  # no budget


def test_idle_versions_are_those_unused_past_their_models_setting() -> None:
    residents = [_r("a", 1, 0.0), _r("b", 1, 5.0), _r("p", 1, 0.0, pinned=True),
                 _r("never", 1, 0.0)]
    found = idle(residents, 10.0, {"a": 6.0, "b": 6.0, "p": 1.0, "never": 0.0})
    assert [r.name for r in found] == ["a"]
