"""Which model versions may stay in memory: the memory budget's accounting and the choice of
what to unload (least recently used first), as pure functions over plain values.

Nothing here loads, unloads or waits: :mod:`edge_agent.core.orchestrator` acts on the plans
made here, and the model manager asks :func:`check_fits` before a deploy changes anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from edge_agent.errors import ModelUnavailableError

MIB = 1 << 20


class MemoryBudgetError(ModelUnavailableError):
    """A version does not fit in ``[agent] memory_budget_mib`` even after unloading every
    idle, unpinned model; the message gives the figures (needed, budget, pinned)."""


@dataclass(frozen=True, slots=True)
class Resident:
    """One loaded model version as the budget sees it.

    ``bytes`` is the best memory figure known for it; ``last_used`` a monotonic time (seconds);
    ``evictable`` False while it may not be unloaded (pinned, a swap under way, loading).
    """

    name: str
    version: int
    bytes: int
    last_used: float
    pinned: bool = False
    evictable: bool = True


def mib(n: int) -> str:
    """``n`` bytes as MiB for messages (one decimal)."""
    return f"{n / MIB:.1f} MiB"


def used(residents: Iterable[Resident]) -> int:
    """Bytes the loaded versions take."""
    return sum(r.bytes for r in residents)


def victims(needed: int, budget: int, residents: Sequence[Resident], *,
            keep: frozenset[str] = frozenset()) -> list[Resident]:
    """The versions to unload, least recently used first, so that ``needed`` more bytes fit.

    ``keep`` names models that must stay (e.g. the old version of a hot swap). Raises
    :class:`MemoryBudgetError` when even unloading every evictable version is not enough.
    """
    free = budget - used(residents)
    if needed <= free:
        return []
    chosen: list[Resident] = []
    for r in sorted(residents, key=lambda r: r.last_used):
        if r.pinned or not r.evictable or r.name in keep:
            continue
        chosen.append(r)
        free += r.bytes
        if needed <= free:
            return chosen
    raise MemoryBudgetError(refusal(needed, budget, residents, keep=keep))


def refusal(needed: int, budget: int, residents: Sequence[Resident], *,
            keep: frozenset[str] = frozenset(), what: str = "") -> str:
    """The one-line reason a version does not fit, with the figures."""
    held = [r for r in residents if r.pinned or not r.evictable or r.name in keep]
    pinned = [r for r in held if r.pinned]
    busy = [r for r in held if not r.pinned]
    parts = [f"{what or 'the version'} needs {mib(needed)} but the memory budget is "
             f"{mib(budget)}"]
    if pinned:
        parts.append("pinned: " + ", ".join(f"{r.name} v{r.version} {mib(r.bytes)}"
                                            for r in pinned))
    if busy:
        parts.append("not unloadable now: " + ", ".join(
            f"{r.name} v{r.version} {mib(r.bytes)}" for r in busy))
    room = budget - used(held)
    parts.append(f"at most {mib(max(0, room))} can be freed for it")
    return "; ".join(parts) + ("; raise [agent] memory_budget_mib, unpin a model or remove one")


def check_fits(needed: int, budget: int | None, residents: Sequence[Resident], *,
               name: str, version: int, swap_from: Resident | None = None) -> None:
    """Raise :class:`MemoryBudgetError` when ``name`` ``version`` (``needed`` bytes) cannot be
    loaded within ``budget`` even after unloading every evictable version.

    ``swap_from``: the version it replaces, which stays loaded until the switch (a hot swap
    needs both at once); the message says so when that is why it does not fit.
    """
    if budget is None:
        return
    others = [r for r in residents if r.name != name]
    keep: frozenset[str] = frozenset()
    total = needed
    what = f"{name} version {version}"
    if swap_from is not None:
        total += swap_from.bytes
        what = (f"a hot swap of {name} (version {swap_from.version}, {mib(swap_from.bytes)}, "
                f"and version {version}, {mib(needed)}, loaded at once)")
    held = used(r for r in others if r.pinned or not r.evictable)
    if total <= budget - held:
        return
    raise MemoryBudgetError(refusal(total, budget, others, keep=keep, what=what))


def idle(residents: Sequence[Resident], now: float,
         idle_after: dict[str, float]) -> list[Resident]:
    """Versions unused for longer than their model's ``idle_after`` seconds (> 0), oldest
    first; pinned and unevictable ones never."""
    out = [r for r in residents if r.evictable and not r.pinned
           and idle_after.get(r.name, 0) > 0 and now - r.last_used >= idle_after[r.name]]
    return sorted(out, key=lambda r: r.last_used)
