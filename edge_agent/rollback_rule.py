"""The one rollback rule, shared by the agent (which acts on it) and the console (which
preselects its target). Pure: plain values in, no imports beyond the standard library.

A rollback goes to the version that was active before the current one, as the committed
history says, skipping every version that a rollback (manual or automatic) left and that has
not been activated again since, and every version not usable (gone from disk, or failed).
Without such history it goes to the highest usable version below the active one, with the
same exclusion. Why: right after a rollback, "the previously active version" is the version
just rolled back from, so a plain "previous" rule toggles between a good and a bad version.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

ACTIVATING_KINDS = ("deploy", "rollback", "activate", "auto-rollback")
ROLLBACK_KINDS = ("rollback", "auto-rollback")


class Change(Protocol):
    """What the rule reads of one deployment (the store's record or the client's copy)."""

    @property
    def kind(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def from_version(self) -> int | None: ...

    @property
    def to_version(self) -> int | None: ...


def rollback_target(active: int, usable: Collection[int],
                    history: Sequence[Change]) -> tuple[int | None, str]:
    """``(target, why)`` for a model whose active version is ``active``.

    ``usable``: versions on disk and not failed; ``history``: the model's deployments, newest
    first. ``target`` None means there is none and ``why`` says so (naming skipped versions).
    """
    committed = [d for d in reversed(history)
                 if d.status == "committed" and d.kind in ACTIVATING_KINDS]  # oldest first
    rolled_back_from: set[int] = set()
    for d in committed:
        if d.to_version is not None:
            rolled_back_from.discard(d.to_version)
        if (d.kind in ROLLBACK_KINDS and d.from_version is not None
                and d.from_version != d.to_version):
            rolled_back_from.add(d.from_version)
    candidates = {v for v in usable if v != active} - rolled_back_from
    for d in reversed(committed):  # newest first: the versions that were active, in order
        for v in (d.from_version, d.to_version):
            if v is not None and v in candidates:
                return v, f"version {v} was active before {active}"
    older = sorted(v for v in candidates if v < active)
    if older:
        return older[-1], f"version {older[-1]} is the highest version below {active} here"
    skipped = sorted(v for v in usable if v in rolled_back_from and v != active)
    return None, ("no earlier version on this device to roll back to (active: "
                  f"{active}" + (f"; not going back to version(s) {skipped}, rolled back from "
                                 "earlier: activate one explicitly to serve it again"
                                 if skipped else "") + ")")
