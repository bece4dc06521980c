"""Keep-K retention: after a committed deploy, delete the oldest versions beyond the limit.

Failed versions go first; the active version, the rollback target and anything loaded stay.
"""

from __future__ import annotations

from collections.abc import Callable

from edge_agent.deploy.files import VersionFiles
from edge_agent.state import StateStore, VersionState


def prune(model: str, *, keep: int, store: StateStore, files: VersionFiles,
          rollback_target: int | None, is_loaded: Callable[[str, int], bool]) -> list[int]:
    """Delete ``model``'s versions beyond the ``keep`` newest usable ones; returns them."""
    keep_n = max(1, keep)
    active = store.active_version(model)
    records = store.versions(model)
    usable = [r.version for r in sorted(records, key=lambda r: -r.version)
              if r.state is not VersionState.FAILED]  # failed versions go first
    kept = set(usable[:keep_n]) | {v for v in (active, rollback_target) if v is not None}
    pruned = []
    for v in sorted((r.version for r in records), reverse=True):
        if v in kept or is_loaded(model, v):
            continue
        files.delete(model, v)
        store.remove_version(model, v)
        pruned.append(v)
    return pruned
