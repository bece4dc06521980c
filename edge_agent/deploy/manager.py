"""The model manager: the one writer of what each model serves.

It composes small parts, each given its collaborators and hooks when built:

- :mod:`~edge_agent.deploy.recovery` (start-up repairs and loading the active versions),
- :mod:`~edge_agent.deploy.pipeline` (deploy / activate: verify, stage, load, probe, switch,
  drain, unload, commit) over :mod:`~edge_agent.deploy.journal` (the durable step record),
- :mod:`~edge_agent.deploy.files` (versions on disk), :mod:`~edge_agent.deploy.pruning`
  (keep-K), :mod:`~edge_agent.deploy.watcher` (automatic rollback on the error rate),
- :mod:`~edge_agent.deploy.queries` (versions, history, the rollback target),
- :mod:`~edge_agent.deploy.serving` (KServe load/unload: the active version only),
- :mod:`~edge_agent.deploy.locks` (one change per model at a time).

A crash at any step leaves the store's active version unchanged, so the next start serves it
again. After a committed deploy a watcher checks the new version's error rate for
``watch_window_s`` and rolls back by itself when it passes the threshold.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edge_agent.config.deploy import ManagerSettings
from edge_agent.core.deploy_port import DeployPort
from edge_agent.core.repository import VersionSlot
from edge_agent.core.triton_wording import failed_to_load
from edge_agent.deploy.compat import display_name
from edge_agent.deploy.device import DeviceInfo, detect_device
from edge_agent.deploy.errors import InvalidBundleError, ManagerError, VersionInUseError
from edge_agent.deploy.files import VersionFiles
from edge_agent.deploy.journal import (
    DeploymentJournal,
    EventSink,
    RecordingFailed,
    StepHook,
)
from edge_agent.deploy.live_settings import LiveSettings, SettingView, describe_change
from edge_agent.deploy.locks import ModelLocks
from edge_agent.deploy.outcome import DeployOutcome, VersionView
from edge_agent.deploy.pins import pinned_message, pipelines_pinning
from edge_agent.deploy.pipeline import DeployPipeline
from edge_agent.deploy.pruning import prune
from edge_agent.deploy.queries import RollbackPlan, VersionQueries, names_of
from edge_agent.deploy.recovery import StartupRecovery
from edge_agent.deploy.serving import ServingControl
from edge_agent.deploy.watcher import ErrorRateWatchers
from edge_agent.errors import AgentError, ModelNotFoundError, StateStoreError
from edge_agent.state import (
    Deployment,
    DeploymentKind,
    DeploymentStatus,
    StateStore,
    Step,
    VersionState,
)
from packager.bundle.errors import PackagerError
from packager.bundle.manifest import Manifest
from packager.bundle.reader import open_bundle

log = logging.getLogger(__name__)

__all__ = ["ManagerSettings", "ModelManager", "names_of"]




class ModelManager:
    """Owns which version of each model is active; every change goes through the pipeline.

    Call :meth:`start` once (instead of ``DataPlane.load_all``) and :meth:`close` at shutdown.
    Every public method is thread-safe; changes to one model are serialized (a second change
    while one runs gets DeploymentBusyError). ``step_hooks`` hear of every deployment step
    right after it is recorded.
    """

    def __init__(self, plane: DeployPort, store: StateStore,
                 settings: ManagerSettings | None = None,
                 device: DeviceInfo | None = None, *,
                 step_hooks: Sequence[StepHook] = ()) -> None:
        self.settings = settings or ManagerSettings()
        self.device = device or detect_device(self.settings.profile)
        self.plane = plane
        self.store = store
        self.locks = ModelLocks()
        self.files = VersionFiles(plane.state_dir, plane.models_dir)
        self.queries = VersionQueries(store, plane)
        self.journal = DeploymentJournal(store, step_hooks=step_hooks)
        self.watchers = ErrorRateWatchers(self.plane, lambda: self.settings,
                                          rollback=self._auto_rollback)
        self.pipeline = DeployPipeline(self.plane, store, self.files, self.journal,
                                       self.device, lambda: self.settings,
                                       on_begin=self.watchers.cancel,
                                       on_commit=self._committed, memory=self.memory_check)
        self.live_settings = LiveSettings(self.plane, store)
        self.serving = ServingControl(self.plane, store, self.journal, self.locks,
                                      lambda: self.settings, on_unload=self._unloaded)
        plane.set_loader(
            self._load_active, on_loaded=self._measured, active=store.active_version,
            pinned=lambda name, version: bool(pipelines_pinning(self.plane, name, version)))
        for rec in store.versions():
            plane.seed(rec.model, rec.version, rec.rss_delta_bytes)

    # ------------------------------------------------------------------ start-up
    def start(self) -> list[str]:
        """Recover from a crash, register versions on disk, load the active versions.

        Returns one line per thing it repaired (for the log). Sets the data plane ready.
        """
        notes: list[str] = []
        self.live_settings.apply_stored(notes.append)
        return notes + StartupRecovery(self.plane, self.store, self.files, self.journal,
                                       self.queries, fall_back=self._fall_back).run()

    def _fall_back(self, name: str, broken: int, error: str) -> list[str]:
        """The active version failed to load at start-up: go back to the rollback target."""
        target = self.rollback_target(name)
        if target is None:
            return [f"{name} version {broken} failed to load ({error}) and there is no "
                    "earlier version to fall back to"]
        reason = (f"automatic rollback: active version {broken} failed to load at start-up "
                  f"({error})")
        outcome = self.activate(name, target, kind=DeploymentKind.AUTO_ROLLBACK, reason=reason)
        return [reason + (f"; now serving version {target}" if outcome.ok
                          else f"; falling back to {target} failed too: {outcome.message}")]

    # ------------------------------------------------------------------ queries
    def versions(self, model: str | None = None) -> list[VersionView]:
        """Every version on disk (of one model, or all), with serving state and load figures."""
        return self.queries.versions(model)

    def history(self, model: str | None = None, limit: int = 50) -> list[Deployment]:
        """Deployments, newest first."""
        return self.queries.history(model, limit)

    def rollback_target(self, model: str) -> int | None:
        """The version a rollback returns to (see :meth:`rollback_plan`)."""
        return self.queries.rollback_target(model)

    def rollback_plan(self, model: str) -> RollbackPlan:
        """Where a rollback of ``model`` would go now, and why; changes nothing."""
        return self.queries.rollback_plan(model)

    # ------------------------------------------------------------------ changes
    def new_upload_path(self) -> Path:
        """A fresh file under ``STATE_DIR/incoming/`` to receive an upload into."""
        return self.files.new_upload_path()

    def deploy(self, bundle_path: Path, *, force: bool = False,
               on_event: EventSink | None = None, source: str | None = None,
               origin: str | None = None) -> DeployOutcome:
        """Run the whole pipeline for one bundle file; the outcome says how far it got.

        ``force`` reloads a version that is already active (same content). ``source`` is the
        name the user knows the bundle by (the uploaded file's name): messages say it instead
        of the agent's internal upload path. Raises only for a file that is not a bundle and
        for a model that is busy; step failures are outcomes. ``origin``: the registry
        reference a bundle was pulled from (deploy by reference), said in the first step.
        """
        try:
            reader = open_bundle(Path(bundle_path), label=display_name(source))
        except PackagerError as exc:
            raise InvalidBundleError(f"the upload is not a valid bundle: {exc}") from None
        with reader, self.locks.hold(reader.manifest.name):
            size = Path(bundle_path).stat().st_size
            return self.pipeline.deploy(reader, size, force=force, on_event=on_event,
                                        origin=origin)

    def activate(self, model: str, version: int, *, force: bool = False,
                 on_event: EventSink | None = None,
                 kind: DeploymentKind = DeploymentKind.ACTIVATE,
                 reason: str = "", note: str = "") -> DeployOutcome:
        """Make ``version`` (on disk) active through warm-up, probe and switch.

        ``force`` with the active version reloads it from disk (a fresh copy, swapped in).
        ``reason`` replaces the commit message (automatic changes); ``note`` is added to it.
        """
        with self.locks.hold(model):
            active = self.store.active_version(model)
            if self.store.version(model, version) is None:
                have = [r.version for r in self.store.versions(model)]
                raise ModelNotFoundError(f"{model} has no version {version} on this device "
                                         f"(versions on disk: {have or 'none'})")
            if version == active and not force:
                raise VersionInUseError(f"{model} version {version} is already active; pass "
                                        "force to reload it")
            return self.pipeline.activate(model, version, active, kind=kind, reason=reason,
                                          note=note, on_event=on_event)

    def rollback(self, model: str, to_version: int | None = None, *,
                 on_event: EventSink | None = None) -> DeployOutcome:
        """Switch back to the rollback target (see :meth:`rollback_plan`) or ``to_version``.

        The target and why it was chosen are the deployment's first step and part of its
        message, so the caller's progress shows where it goes before anything is loaded.
        """
        if to_version is not None:
            return self.activate(model, to_version, on_event=on_event,
                                 kind=DeploymentKind.ROLLBACK,
                                 note=f"rollback target: version {to_version}, named by the caller")
        plan = self.rollback_plan(model)
        if plan.target is None:
            if plan.active is None:
                raise ModelNotFoundError(f"{model} has no active version to roll back from")
            raise ManagerError(plan.why)
        return self.activate(model, plan.target, on_event=on_event,
                             kind=DeploymentKind.ROLLBACK, note=f"rollback target: {plan.why}")

    def remove(self, model: str, version: int) -> DeployOutcome:
        """Delete a version that is not active from memory and disk."""
        with self.locks.hold(model):
            if self.store.active_version(model) == version:
                raise VersionInUseError(f"{model} version {version} is active; activate or "
                                        "roll back to another version first")
            if self.store.version(model, version) is None:
                raise ModelNotFoundError(f"{model} has no version {version} on this device")
            self._check_unpinned(model, [version])
            return self._remove_locked(model, version)

    def remove_model(self, model: str) -> DeployOutcome:
        """Stop serving ``model`` and delete every version of it from memory and disk (the
        active one last, which leaves the model with no active version); requests for it are
        then refused as for a model never deployed. The fleet's removal of a model that a
        newer desired state no longer names (docs/fleet.md)."""
        with self.locks.hold(model):
            versions = [r.version for r in self.store.versions(model)]
            if not versions:
                raise ModelNotFoundError(f"model {model!r} is not on this device")
            self._check_unpinned(model, versions)
            active = self.store.active_version(model)
            self._unloaded(model)  # requests do not load it back while it goes
            outcome: DeployOutcome | None = None
            for version in sorted(versions, key=lambda v: v == active):
                outcome = self._remove_locked(model, version)
                if not outcome.ok:
                    return outcome
            assert outcome is not None
            return outcome

    def _check_unpinned(self, model: str, versions: Sequence[int]) -> None:
        for version in versions:
            users = pipelines_pinning(self.plane, model, version)
            if users:
                raise VersionInUseError(pinned_message(model, version, users))

    def _remove_locked(self, model: str, version: int) -> DeployOutcome:
        """Unload ``version`` when loaded, delete its files, commit a REMOVE (the model's
        lock held)."""
        dep = self.pipeline.begin(model, DeploymentKind.REMOVE, version, None)
        try:
            if self.pipeline.loaded(model, version):
                self.plane.unload_version(
                    model, version, drain_timeout_s=self.settings.drain_timeout_s)
                self.journal.reached(dep, Step.UNLOADED, f"version {version} unloaded",
                                     None)
            self.files.delete(model, version)
            done = self.journal.commit(dep, f"version {version} removed from disk", None)
        except RecordingFailed as failure:
            return self.journal.abandon(dep, model, failure, None)
        return DeployOutcome(done, True, done.reason, self.store.active_version(model))

    def model_settings(self, model: str) -> list[SettingView]:
        """Every setting of ``model``: its effective value and where it comes from."""
        if model not in self.plane.model_names() and not self.store.versions(model):
            raise ModelNotFoundError(f"model {model!r} is not on this device")
        return self.live_settings.view(model)

    def change_settings(self, model: str, set_values: Mapping[str, Any] | None = None,
                        unset: Sequence[str] = (), *, replace: bool = False,
                        on_event: EventSink | None = None) -> DeployOutcome:
        """Change ``model``'s live settings through the hot-swap path (a ``settings``
        deployment). ``unset`` keys go back to agent.toml's value; ``replace`` drops every
        live setting not in ``set_values``. Bad keys or values raise InvalidSettingsError
        before anything is recorded."""
        with self.locks.hold(model):
            if model not in self.plane.model_names() and not self.store.versions(model):
                raise ModelNotFoundError(f"model {model!r} is not on this device")
            before, after, overrides = self.live_settings.plan(model, set_values or {}, unset,
                                                               replace)
            active = self.store.active_version(model)
            dep = self.pipeline.begin(model, DeploymentKind.SETTINGS, active, active)
            try:
                self.store.record_settings_change(dep, json.dumps(before), json.dumps(after))
                return self.pipeline.change_settings(dep, model, active, overrides,
                                                     describe_change(before, after), on_event)
            except RecordingFailed as failure:
                return self.journal.abandon(dep, model, failure, on_event)
            except StateStoreError as exc:
                return self.journal.abandon(dep, model, RecordingFailed(
                    Step.RECEIVED, self.journal.clean(exc, "record the settings")), on_event)

    def revert_settings(self, model: str, *, on_event: EventSink | None = None) -> DeployOutcome:
        """Go back to the live settings before the last committed settings change."""
        for dep in self.store.history(model, limit=200):
            if dep.kind is DeploymentKind.SETTINGS and dep.status is DeploymentStatus.COMMITTED:
                change = self.store.settings_change(dep.id)
                if change is not None:
                    return self.change_settings(model, json.loads(change[0]), replace=True,
                                                on_event=on_event)
        raise ManagerError(f"{model} has no committed settings change to revert")

    def load_model(self, name: str, settings: Mapping[str, Any] | None = None) -> str:
        """Load the active version of ``name`` again (never another); returns a summary.

        ``settings`` (a KServe load's ``config``, as live settings keys) are applied first as
        a live settings change (:meth:`change_settings`; InvalidSettingsError before anything
        is recorded); a change that fails leaves the model as it was and raises ManagerError
        in Triton's "failed to load" words."""
        if not settings:
            return self.serving.load(name)
        if name not in self.plane.model_names() and not self.store.versions(name):
            raise ModelNotFoundError(f"{failed_to_load(name)}: model {name!r} is not on this "
                                     "device; deploy it with edge-console first")
        outcome = self.change_settings(name, settings)
        if not outcome.ok:
            raise ManagerError(f"{failed_to_load(name)}: {outcome.message}")
        return f"{outcome.message}; {self.serving.load(name)}"

    def unload_model(self, name: str) -> str:
        """Take every version of ``name`` out of memory (files stay); returns a summary."""
        return self.serving.unload(name)

    def close(self) -> None:
        """Stop the error-rate watchers."""
        self.watchers.close()

    # ------------------------------------------------------------------ orchestration
    def memory_check(self, manifest: Manifest, active: int | None) -> None:
        """MemoryBudgetError when ``manifest``'s version cannot be loaded within the budget
        (``active``: the version it would replace; a hot swap holds both); changes nothing."""
        needed, _source = self.plane.needed_for(manifest)
        self.plane.check_deploy(manifest.name, manifest.version, needed,
                                       swap_from=active)

    def _load_active(self, name: str) -> VersionSlot:
        """Load ``name``'s active version for a request (on demand, or after an unload)."""
        active = self.store.active_version(name)
        if active is None:
            raise ModelNotFoundError(f"model {name!r} has no active version on this device")
        mv = self.plane.load_version(name, active)
        self.plane.set_default(name, active)
        return mv

    def _measured(self, mv: VersionSlot, load_ms: float, rss: int | None) -> None:
        with contextlib.suppress(AgentError):
            self.store.set_version_state(mv.name, mv.version, VersionState.READY,
                                         load_ms=load_ms, rss_delta_bytes=rss)

    def _unloaded(self, name: str) -> None:
        """An operator unloaded ``name`` (KServe): requests do not load it back."""
        self.watchers.cancel(name)
        self.plane.hold(name)

    # ------------------------------------------------------------------ hooks
    def _kept(self, model: str, version: int) -> bool:
        """Whether retention must keep ``version``: loaded, or pinned by a served pipeline."""
        return self.pipeline.loaded(model, version) or bool(
            pipelines_pinning(self.plane, model, version))

    def _committed(self, done: Deployment, previous: int | None) -> None:
        """After a commit: prune old versions (deploys) and watch the new version's errors."""
        if done.kind is not DeploymentKind.DEPLOY:
            return
        version = done.to_version
        try:
            pruned = prune(done.model, keep=self.settings.keep_versions, store=self.store,
                           files=self.files, rollback_target=self.rollback_target(done.model),
                           is_loaded=self._kept)
        except (AgentError, OSError) as exc:  # the deploy is committed: pruning waits
            log.warning("%s: old versions were not pruned: %s", done.model, exc)
            pruned = []
        if pruned:
            log.info("pruned %s versions %s (keep_versions=%d)", done.model, pruned,
                     self.settings.keep_versions)
        if (previous is not None and version is not None and previous != version
                and self.settings.watch_window_s > 0):
            self.watchers.watch(done.model, version, previous, done.id)

    def _auto_rollback(self, model: str, previous: int, reason: str) -> None:
        self.activate(model, previous, kind=DeploymentKind.AUTO_ROLLBACK, reason=reason)
