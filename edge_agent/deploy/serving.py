"""Take a model out of memory, or bring its active version back (KServe repository control).

These are changes like any other: they take the model's lock (so they never interleave with a
deploy), bring back only the version the state store says is active (never a retained older
one, which may have been rolled back from), and record each version's stored state.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from edge_agent.config.deploy import ManagerSettings
from edge_agent.core.deploy_port import DeployPort
from edge_agent.core.overrides import policy_versions
from edge_agent.core.triton_wording import failed_to_load
from edge_agent.deploy.errors import ManagerError, VersionInUseError
from edge_agent.deploy.journal import DeploymentJournal
from edge_agent.deploy.locks import ModelLocks
from edge_agent.deploy.pins import pinned_message, pipelines_pinning
from edge_agent.errors import AgentError, ModelNotFoundError, StateStoreError
from edge_agent.state import StateStore, VersionState


class ServingControl:
    """Loads and unloads whole models on request, through the manager's lock."""

    def __init__(self, plane: DeployPort, store: StateStore,
                 journal: DeploymentJournal, locks: ModelLocks,
                 settings: Callable[[], ManagerSettings], *,
                 on_unload: Callable[[str], None] | None = None) -> None:
        self.plane = plane
        self.store = store
        self.journal = journal
        self.locks = locks
        self._settings = settings
        self._on_unload = on_unload

    def load(self, name: str) -> str:
        """Load the active version of ``name`` (a no-op when it serves), and the other
        versions the model's ``version_policy`` names; returns a summary."""
        with self.locks.hold(name):
            active = self.store.active_version(name)
            if active is None:
                if self.store.versions(name):
                    raise ManagerError(f"{name} has no active version; activate one through "
                                       "the management API (edge-console)")
                raise ModelNotFoundError(f"{failed_to_load(name)}: model {name!r} is not on "
                                         "this device; deploy it with edge-console first")
            others = self._policy_versions(name, active)
            summary = self._load_active(name, active)
            for v in others:
                with contextlib.suppress(AgentError):
                    self.plane.resolve(name, v)
                    continue
                t0 = time.perf_counter()
                mv = self.plane.load_version(name, v)
                self.journal.record_load(mv, (time.perf_counter() - t0) * 1000, None)
            if others:
                summary += f"; also version(s) {others} (version_policy)"
            return summary

    def _policy_versions(self, name: str, active: int) -> list[int]:
        """The versions besides ``active`` that the model's version_policy loads."""
        policy = self.plane.overrides_for(name).version_policy
        on_disk = [r.version for r in self.store.versions(name)]
        return [v for v in policy_versions(policy, on_disk, active) if v != active]

    def _load_active(self, name: str, active: int) -> str:
        with contextlib.suppress(AgentError):
            self.plane.resolve(name, active)
            return f"{name} version {active} is already loaded"
        if any(mv.version == active for mv in self.plane.versions(name)):
            self.plane.unload_version(name, active, drain_timeout_s=0)  # failed copy
        t0 = time.perf_counter()
        mv = self.plane.load_version(name, active)
        self.journal.record_load(mv, (time.perf_counter() - t0) * 1000, None)
        self.plane.set_default(name, active)
        return f"{name} version {active} loaded"

    def unload(self, name: str) -> str:
        """Unload every version of ``name`` (draining in-flight requests); files stay."""
        with self.locks.hold(name):
            versions = [mv.version for mv in self.plane.versions(name)]
            if not versions:
                if self.store.versions(name):
                    return f"{name} was not loaded"
                raise ModelNotFoundError(f"model {name!r} is not on this device")
            for v in versions:
                users = pipelines_pinning(self.plane, name, v)
                if users:
                    raise VersionInUseError(pinned_message(name, v, users))
            if self._on_unload is not None:
                self._on_unload(name)
            for v in versions:
                self.plane.unload_version(name, v,
                                               drain_timeout_s=self._settings().drain_timeout_s)
                with contextlib.suppress(StateStoreError):
                    self.store.set_version_state(name, v, VersionState.UNLOADED)
            return f"{name} unloaded (version(s) {versions}); files kept"
