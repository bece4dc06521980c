"""Start-up: repair what a crash left, register versions on disk, load the active versions.

Order: unfinished uploads and half-extracted versions removed -> deployments the store found in
progress undone (a version staged by an interrupted deploy that never became active is
deleted) -> versions on disk and in the store reconciled -> versions whose files no longer
match their manifest (sizes and sha256) removed -> the active versions loaded (only
those: retained older versions stay on disk) -> a model whose active version fails to load falls
back to its rollback target through the ``fall_back`` hook.
"""

from __future__ import annotations

from collections.abc import Callable

from edge_agent.core.deploy_port import DeployPort
from edge_agent.deploy.files import VersionFiles, dir_size, manifest_sha
from edge_agent.deploy.journal import DeploymentJournal
from edge_agent.deploy.queries import VersionQueries
from edge_agent.errors import AgentError
from edge_agent.state import DeploymentKind, StateStore, VersionRecord, VersionState

FallBackHook = Callable[[str, int, str], list[str]]
"""(model, the active version that did not load, its error) -> notes for the log."""


class StartupRecovery:
    """Runs once, before the agent reports ready; returns one note per repair."""

    def __init__(self, plane: DeployPort, store: StateStore, files: VersionFiles,
                 journal: DeploymentJournal, queries: VersionQueries,
                 fall_back: FallBackHook) -> None:
        self.plane = plane
        self.store = store
        self.files = files
        self.journal = journal
        self.queries = queries
        self._fall_back = fall_back

    def run(self) -> list[str]:
        """Recover, load the active versions, set the data plane ready; returns the notes."""
        notes = self.files.clean_partial()
        notes += self._undo_interrupted()
        notes += self._register_disk_versions()
        notes += self._remove_damaged()
        active = self.store.active_versions()
        managed = {m for m, v in active.items() if v is not None}
        self.plane.load_all(
            only=lambda name, v: name not in managed or active.get(name) == v)
        unfit = self.plane.did_not_fit
        for mv in self.plane.versions():
            if not unfit(mv.name):  # not a failure of the version: the budget was full
                self.journal.record_load(mv, None, None)
        for name in self.plane.model_names():
            v = active.get(name)
            if v is not None and self._ready(name, v):
                self.plane.set_default(name, v)
            elif v is None:
                notes += self._first_activation(name)
            elif unfit(name):
                notes.append(f"{name} version {v} was not loaded: it does not fit in the memory "
                             "budget next to the pinned models; a request loads it when room "
                             "frees")
            else:
                error = next((mv.reason for mv in self.plane.versions(name)
                              if mv.version == v), "") or "it did not load"
                notes += self._fall_back(name, v, error)
        for name, versions in self.plane.scan().items():  # on-demand: not loaded here
            if name not in self.plane.model_names() and active.get(name) is None:
                notes += self._first_activation(name, versions[-1])
        return notes

    def _ready(self, name: str, version: int) -> bool:
        try:
            self.plane.resolve(name, version)
        except AgentError:
            return False
        return True

    def _undo_interrupted(self) -> list[str]:
        notes = []
        for dep in self.store.recovered:
            notes.append(f"deployment {dep.id} ({dep.kind} of {dep.model} version "
                         f"{dep.to_version}) was interrupted at {dep.last_step}; "
                         f"version {dep.from_version} stays active"
                         + (" with the settings before the change"
                            if dep.kind is DeploymentKind.SETTINGS else ""))
            if dep.kind is not DeploymentKind.DEPLOY or dep.to_version is None:
                continue
            if self.store.active_version(dep.model) == dep.to_version:
                continue
            if self.queries.ever_committed(dep.model, dep.to_version):
                continue
            self.files.delete(dep.model, dep.to_version)
            if self.store.version(dep.model, dep.to_version) is not None:
                self.store.remove_version(dep.model, dep.to_version)
            notes.append(f"removed {dep.model} version {dep.to_version} staged by the "
                         "interrupted deployment")
        return notes

    def _register_disk_versions(self) -> list[str]:
        notes = []
        on_disk = self.plane.scan()
        for name, versions in on_disk.items():
            for v in versions:
                if self.store.version(name, v) is None:
                    path = self.files.path(name, v)
                    self.store.upsert_version(VersionRecord(
                        name, v, str(path), manifest_sha(path), dir_size(path)))
                    notes.append(f"registered {name} version {v} found on disk")
        for rec in self.store.versions():
            if rec.version not in on_disk.get(rec.model, []):
                if self.store.active_version(rec.model) == rec.version:
                    self.store.set_version_state(rec.model, rec.version, VersionState.FAILED,
                                                 load_error="its files are missing from disk")
                else:
                    self.store.remove_version(rec.model, rec.version)
                notes.append(f"{rec.model} version {rec.version} is no longer on disk")
        return notes

    def _remove_damaged(self) -> list[str]:
        """Versions whose files no longer match their manifest are removed, except an active
        one: loading it fails on the same check and the model falls back (see run)."""
        notes = []
        for rec in self.store.versions():
            if self.store.active_version(rec.model) == rec.version:
                continue
            if not self.files.path(rec.model, rec.version).is_dir():
                continue
            damage = self.files.damage(rec.model, rec.version)
            if damage is not None:
                self.files.delete(rec.model, rec.version)
                self.store.remove_version(rec.model, rec.version)
                notes.append(f"removed {rec.model} version {rec.version}: its files do not "
                             f"match its manifest ({damage}); deploy it again to restore it")
        return notes

    def _first_activation(self, name: str, on_demand: int | None = None) -> list[str]:
        """Make the version a model serves (or, ``on_demand``, will load) active."""
        v = self.plane.default_version(name) if on_demand is None else on_demand
        if v is None:
            return []
        dep = self.journal.begin(name, DeploymentKind.ACTIVATE, v, None)
        self.store.commit_deployment(dep, f"version {v} found on disk at start-up")
        if on_demand is None:
            self.plane.set_default(name, v)
        return [f"activated {name} version {v} (found on disk)"]
