"""Read-only views of what the manager keeps: versions, history, and the rollback target
(the rule itself is :mod:`edge_agent.rollback_rule`, shared with the console)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.core.deploy_port import DeployPort
from edge_agent.core.repository import ServingState
from edge_agent.deploy.outcome import VersionView
from edge_agent.rollback_rule import rollback_target
from edge_agent.state import (
    Deployment,
    DeploymentKind,
    DeploymentStatus,
    StateStore,
    VersionState,
)
from packager.bundle.errors import PackagerError
from packager.bundle.reader import load_extracted

ACTIVATING = (DeploymentKind.DEPLOY, DeploymentKind.ROLLBACK, DeploymentKind.ACTIVATE,
              DeploymentKind.AUTO_ROLLBACK)
_HISTORY_DEPTH = 1000


@dataclass(frozen=True, slots=True)
class RollbackPlan:
    """Where a rollback of ``model`` would go now, and why (``target`` None: nowhere)."""

    model: str
    active: int | None
    target: int | None
    why: str


class VersionQueries:
    """Answers questions about versions from the state store and the data plane."""

    def __init__(self, store: StateStore, plane: DeployPort) -> None:
        self.store = store
        self.plane = plane

    def versions(self, model: str | None = None) -> list[VersionView]:
        """Every version on disk (of one model, or all), with serving state and load figures."""
        active = self.store.active_versions()
        parity = self.store.parity()
        loaded = {(mv.name, mv.version): mv for mv in self.plane.versions()}
        out = []
        for rec in self.store.versions(model):
            mv = loaded.get((rec.model, rec.version))
            profile = backend = ""
            if mv is not None and mv.loaded is not None:
                profile, backend = mv.loaded.manifest.profile, mv.loaded.backend_name
            else:
                with contextlib.suppress(PackagerError, OSError):
                    m = load_extracted(Path(rec.path), verify_hashes=False)
                    profile, backend = m.profile, m.backend
            state = mv.state.value if mv is not None else ServingState.UNAVAILABLE.value
            error = rec.load_error or (mv.reason if mv is not None and mv.state
                                       is ServingState.UNAVAILABLE else "")
            counts = self.plane.cache_counts(rec.model, rec.version) if mv is not None \
                else None
            slots = self.plane.version_sequences(rec.model, rec.version) if mv is not None \
                else None
            out.append(VersionView(
                model=rec.model, version=rec.version,
                active=active.get(rec.model) == rec.version, state=state,
                stored_state=rec.state.value, profile=profile, backend=backend,
                load_ms=rec.load_ms, rss_delta_bytes=rec.rss_delta_bytes, load_error=error or "",
                size_bytes=rec.size_bytes, added_at=rec.added_at,
                parity=parity.get((rec.model, rec.version)), response_cache=counts is not None,
                cache_hits=counts.hit.count if counts else 0,
                cache_misses=counts.miss.count if counts else 0,
                cancelled_requests=mv.loaded.batcher.stats.cancel.count
                if mv is not None and mv.loaded is not None else 0,
                sequences_active=slots[0] if slots else 0,
                sequence_slots=slots[1] if slots else 0,
                **self._residency(rec.model, rec.version, mv is not None)))
        return out

    def _residency(self, name: str, version: int, loaded: bool) -> dict[str, Any]:
        """The orchestration columns of one version (memory figure, mode, loads, waits)."""
        plane = self.plane
        ov = plane.overrides_for(name)
        out: dict[str, Any] = {"load_mode": ov.load, "pinned": ov.pinned}
        out["memory_bytes"], out["memory_source"] = plane.memory_of(name, version)
        stats = plane.residency_stats(name)
        out.update(loads=stats.loads, unloads=stats.unloads, load_waits=stats.waits,
                   load_wait_ms=stats.wait_ns / 1e6,
                   residency="loaded" if loaded else plane.not_loaded_reason(name)[1])
        return out

    def history(self, model: str | None = None, limit: int = 50) -> list[Deployment]:
        """Deployments, newest first."""
        return self.store.history(model, limit)

    def ever_committed(self, model: str, version: int) -> bool:
        """True when ``version`` was ever made active by a committed deployment."""
        return any(d.status is DeploymentStatus.COMMITTED and d.kind in ACTIVATING
                   and d.to_version == version
                   for d in self.store.history(model, _HISTORY_DEPTH))

    def rollback_plan(self, model: str) -> RollbackPlan:
        """The version a rollback of ``model`` goes to (:mod:`edge_agent.rollback_rule`), and
        why; changes nothing."""
        active = self.store.active_version(model)
        if active is None:
            return RollbackPlan(model, None, None, f"{model} has no active version")
        usable = {r.version for r in self.store.versions(model)
                  if r.state is not VersionState.FAILED}
        target, why = rollback_target(active, usable, self.store.history(model, _HISTORY_DEPTH))
        return RollbackPlan(model, active, target, why if target is not None
                            else f"{model} has {why}")

    def rollback_target(self, model: str) -> int | None:
        """The version a rollback returns to (None: there is none)."""
        return self.rollback_plan(model).target


def names_of(versions: Sequence[VersionView]) -> list[str]:
    """``name:version`` of the active versions (for the mDNS TXT record)."""
    return [f"{v.model}:{v.version}" for v in versions if v.active]
