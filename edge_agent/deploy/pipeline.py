"""The deploy pipeline: received -> verified -> staged -> loaded and warmed -> probed ->
parity (the bundle's reference inputs against the source model's outputs) -> switched ->
drained -> unloaded -> committed, for a bundle (deploy) or a version on disk (activate,
rollback). The caller holds the model's lock.

A failure before the switch leaves the old version serving and untouched; the deployment is
recorded as failed with the step and the reason. The hooks given to the constructor hear of a
deployment beginning (``on_begin(model)``) and committing (``on_commit(deployment, previous)``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from edge_agent.config.deploy import ManagerSettings
from edge_agent.config.models import ModelOverrides
from edge_agent.core.deploy_port import DeployPort
from edge_agent.core.orchestrator import process_rss
from edge_agent.core.repository import LoadedVersion
from edge_agent.deploy.compat import MemoryCheck, check_fits, check_memory, check_signature
from edge_agent.deploy.device import DeviceInfo
from edge_agent.deploy.device_parity import check_loaded_version
from edge_agent.deploy.errors import InvalidBundleError
from edge_agent.deploy.files import VersionFiles, bundle_manifest_sha, dir_size
from edge_agent.deploy.journal import DeploymentJournal, EventSink, RecordingFailed
from edge_agent.deploy.outcome import DeployOutcome
from edge_agent.deploy.pins import pipelines_pinning
from edge_agent.deploy.probe import probe_version
from edge_agent.errors import AgentError, StateStoreError
from edge_agent.state import (
    Deployment,
    DeploymentKind,
    StateStore,
    Step,
    VersionRecord,
    VersionState,
)
from packager.bundle.errors import PackagerError
from packager.bundle.reader import BundleReader

log = logging.getLogger(__name__)

BeginHook = Callable[[str], None]
CommitHook = Callable[[Deployment, "int | None"], None]
_STEP_ERRORS = (AgentError, PackagerError, OSError)


class _StepFailed(Exception):
    def __init__(self, step: Step, error: BaseException) -> None:
        super().__init__(str(error))
        self.step = step
        self.error = error


def _rss() -> int:
    return process_rss()  # the agent and its runtime processes


class DeployPipeline:
    """Runs deployments over one data plane, recording every step in the journal."""

    def __init__(self, plane: DeployPort, store: StateStore, files: VersionFiles,
                 journal: DeploymentJournal, device: DeviceInfo,
                 settings: Callable[[], ManagerSettings], *,
                 on_begin: BeginHook | None = None, on_commit: CommitHook | None = None,
                 memory: MemoryCheck | None = None) -> None:
        self.plane = plane
        self._memory = memory
        self.store = store
        self.files = files
        self.journal = journal
        self.device = device
        self._settings = settings
        self._on_begin = on_begin
        self._on_commit = on_commit

    def begin(self, model: str, kind: DeploymentKind, to_version: int | None,
              from_version: int | None) -> int:
        """Record a new deployment of ``model`` (and tell the on_begin hook)."""
        if self._on_begin is not None:
            self._on_begin(model)
        return self.journal.begin(model, kind, to_version, from_version)

    # ------------------------------------------------------------------ entry points
    def deploy(self, reader: BundleReader, size: int, *, force: bool,
               on_event: EventSink | None, origin: str | None = None) -> DeployOutcome:
        """Verify, stage and switch to the bundle ``reader`` holds (``origin``: where it was
        pulled from, said in the ``received`` step)."""
        active = self.store.active_version(reader.manifest.name)
        dep = self.begin(reader.manifest.name, DeploymentKind.DEPLOY, reader.manifest.version,
                         active)
        return self._guarded(dep, reader.manifest.name, active, on_event, lambda: self._deploy(
            dep, reader, size, active, force=force, on_event=on_event, origin=origin))

    def _deploy(self, dep: int, reader: BundleReader, size: int, active: int | None, *,
                force: bool, on_event: EventSink | None, origin: str | None = None
                ) -> DeployOutcome:
        m, settings = reader.manifest, self._settings()
        step = Step.RECEIVED
        j = self.journal
        try:
            j.reached(dep, Step.RECEIVED, f"{size} bytes: {m.name} version {m.version} for "
                      f"{m.profile}" + (f"; pulled from {origin}" if origin else ""), on_event)
            step = Step.VERIFIED
            backend = check_fits(m, self.device)
            check_memory(m, active, self._memory)  # before anything changes
            key = check_signature(reader.manifest_bytes, m, reader.signature,
                                  settings.trusted_keys, settings.allow_unsigned,
                                  label=reader.label)
            try:
                reader.verify_files()
            except PackagerError as exc:
                raise InvalidBundleError(str(exc)) from None
            signed = f"signed by key {key}" if key else "unsigned (allowed here)"
            j.reached(dep, Step.VERIFIED, f"{signed}; every file hash matches; served by "
                      f"{backend}", on_event)
            step = Step.STAGED
            note, repaired = self.files.stage(reader, active=active, force=force)
            target = self.files.path(m.name, m.version)
            self.store.upsert_version(VersionRecord(
                m.name, m.version, str(target), bundle_manifest_sha(reader), dir_size(target),
                VersionState.STAGED))
            j.reached(dep, Step.STAGED, note, on_event)
        except _STEP_ERRORS as exc:
            return j.fail(dep, step, exc, on_event)
        # the active version again: a fresh copy swapped in when it serves, else a plain load
        reload = m.version == active and (force or repaired) and self.ready(m.name, m.version)
        return self.switch(dep, m.name, m.version, active, on_event, reload=reload)

    def activate(self, model: str, version: int, active: int | None, *,
                 kind: DeploymentKind, reason: str, on_event: EventSink | None,
                 note: str = "") -> DeployOutcome:
        """Make ``version`` (on disk) active; ``version == active`` reloads it.

        ``reason`` (automatic changes) is recorded first and is the commit message; ``note``
        (e.g. why this is the rollback target) is recorded first and added to the message.
        """
        if version != active and not self.ready(model, version):
            manifest = self.files.manifest(model, version)
            if manifest is not None:
                check_memory(manifest, active, self._memory)  # before anything changes
        dep = self.begin(model, kind, version, active)

        def run() -> DeployOutcome:
            if reason or note:
                self.journal.reached(dep, Step.RECEIVED, reason or note, on_event)
            # the active version again: a fresh copy when it serves, else a plain load
            reload = version == active and self.ready(model, version)
            return self.switch(dep, model, version, active, on_event, reload=reload,
                               reason=reason, note=note)

        return self._guarded(dep, model, active, on_event, run)

    def _guarded(self, dep: int, model: str, previous: int | None, on_event: EventSink | None,
                 run: Callable[[], DeployOutcome]) -> DeployOutcome:
        """Run a deployment's steps; when the store cannot record one (disk full, read-only),
        serve ``previous`` again (what the store still says is active) and end the deployment
        (:meth:`DeploymentJournal.abandon`), so the model is never left "in progress"."""
        try:
            return run()
        except RecordingFailed as failure:
            self._serve_again(model, previous)
            return self.journal.abandon(dep, model, failure, on_event)

    def _serve_again(self, name: str, previous: int | None) -> None:
        """Best effort: make ``previous`` the served version of ``name`` and unload others."""
        if previous is None:
            return
        plane = self.plane
        try:
            if not self.ready(name, previous):
                plane.load_version(name, previous)
            plane.set_default(name, previous)
        except (AgentError, PackagerError, OSError) as exc:
            log.error("%s: version %s could not be served again: %s", name, previous, exc)
            return
        for mv in plane.versions(name):
            if mv.version != previous:
                with contextlib.suppress(AgentError):
                    plane.unload_version(name, mv.version, drain_timeout_s=5)

    # ------------------------------------------------------------------ the shared tail
    def switch(self, dep: int, name: str, version: int, previous: int | None,
               on_event: EventSink | None, *, reload: bool, reason: str = "",
               note: str = "") -> DeployOutcome:
        """Load, warm, probe, switch, drain, unload, commit."""
        settings, j, plane = self._settings(), self.journal, self.plane
        step = Step.LOADED
        loaded_here = False
        try:
            if previous is not None and previous != version and self.ready(name, previous):
                plane.set_default(name, previous)  # loading must not switch
            self.store.set_version_state(name, version, VersionState.LOADING)
            if reload:
                self._reload(dep, name, version, on_event)
            else:
                loaded_here = self._load(dep, name, version, on_event)
                step = Step.PROBED
                mv = plane.resolve(name, version)
                msg = probe_version(mv, settings.probe_timeout_s)
                j.reached(dep, Step.PROBED, msg, on_event)
                step = Step.PARITY
                j.reached(dep, Step.PARITY, check_loaded_version(mv, settings.probe_timeout_s),
                          on_event)
        except _StepFailed as failure:
            return j.fail(dep, failure.step, failure.error, on_event, name, version)
        except _STEP_ERRORS as exc:
            if loaded_here:
                with contextlib.suppress(AgentError):
                    plane.unload_version(name, version, drain_timeout_s=5)
            return j.fail(dep, step, exc, on_event, name, version)
        if not reload:
            plane.set_default(name, version)
            j.reached(dep, Step.SWITCHED, f"requests now go to version {version}"
                      + (f" (was {previous})" if previous is not None else ""), on_event)
            pins = pipelines_pinning(plane, name, previous) if previous is not None else []
            if previous is not None and previous != version and pins:
                j.reached(dep, Step.DRAINED, f"version {previous} keeps serving: it is a step "
                          f"pinned by the pipeline {', '.join(pins)}", on_event)
                j.reached(dep, Step.UNLOADED, f"version {previous} stays loaded while pinned",
                          on_event)
            elif previous is not None and previous != version and self.loaded(name, previous):
                drained = plane.unload_version(name, previous,
                                              drain_timeout_s=settings.drain_timeout_s)
                j.reached(dep, Step.DRAINED, (
                    f"in-flight requests of version {previous} answered" if drained else
                    f"version {previous} still had requests after "
                    f"{settings.drain_timeout_s:.0f} s; they were refused"), on_event)
                with contextlib.suppress(StateStoreError):
                    self.store.set_version_state(name, previous, VersionState.UNLOADED)
                j.reached(dep, Step.UNLOADED, f"version {previous} unloaded; kept on disk for "
                          "rollback", on_event)
            else:
                j.reached(dep, Step.DRAINED, "no previous version in memory", on_event)
                j.reached(dep, Step.UNLOADED, "nothing to unload", on_event)
        message = reason or (f"version {version} is active" + (
            f" (was {previous})" if previous is not None and previous != version else "")
            + (f"; {note}" if note else ""))
        done = j.commit(dep, message, on_event)
        if self._on_commit is not None:
            self._on_commit(done, previous)
        return DeployOutcome(done, True, message, version)

    def _load(self, dep: int, name: str, version: int, on_event: EventSink | None) -> bool:
        j = self.journal
        if self.ready(name, version):
            j.reached(dep, Step.LOADED, f"version {version} was already loaded", on_event)
            j.reached(dep, Step.WARMED, "already warm", on_event)
            return False
        if self.loaded(name, version):  # a failed earlier attempt is still listed
            with contextlib.suppress(AgentError):
                self.plane.unload_version(name, version, drain_timeout_s=0)
        rss0, t0 = _rss(), time.perf_counter()
        try:
            slot = self.plane.load_version(name, version)
            mv = self.plane.resolve(name, version)
        except _STEP_ERRORS as exc:
            raise _StepFailed(Step.LOADED, exc) from exc
        load_ms, rss_delta = (time.perf_counter() - t0) * 1000, _rss() - rss0
        j.record_load(slot, load_ms, None)  # the orchestrator stores the memory figure
        j.reached(dep, Step.LOADED, f"{mv.backend_name} backend loaded and warmed up in "
                  f"{load_ms:.0f} ms, RSS {rss_delta / 2**20:+.1f} MiB", on_event)
        instances = mv.batching.instances
        j.reached(dep, Step.WARMED, f"warm-up ran on {instances} instance(s)", on_event)
        return True

    def change_settings(self, dep: int, name: str, version: int | None,
                        overrides: ModelOverrides, change: str,
                        on_event: EventSink | None) -> DeployOutcome:
        """Reload the active ``version`` with ``overrides`` (load, warm, probe, parity, switch,
        drain) and commit deployment ``dep`` (its settings are recorded). A failure keeps the
        old copy serving with the old settings; an unloaded model takes them at its next load.
        """
        j, plane = self.journal, self.plane
        previous = plane.overrides_for(name)
        j.reached(dep, Step.RECEIVED, f"settings: {change}", on_event)
        j.reached(dep, Step.VERIFIED, "every setting is valid", on_event)
        try:
            if version is not None and self.ready(name, version):
                try:
                    self._reload(dep, name, version, on_event, overrides=overrides)
                except _StepFailed as failure:
                    return j.fail(dep, failure.step, failure.error, on_event)
                message = f"settings applied to version {version}: {change}"
            else:
                plane.set_overrides(name, overrides)
                j.reached(dep, Step.SWITCHED, "not loaded: the settings apply at its next load",
                          on_event)
                message = f"settings recorded (apply at the next load): {change}"
            return DeployOutcome(j.commit(dep, message, on_event), True, message, version)
        except RecordingFailed:
            plane.set_overrides(name, previous)  # the store still holds the old settings
            raise

    def _reload(self, dep: int, name: str, version: int, on_event: EventSink | None, *,
                overrides: ModelOverrides | None = None) -> bool:
        j, settings = self.journal, self._settings()
        rss0, t0 = _rss(), time.perf_counter()

        def check(mv: LoadedVersion) -> None:
            load_ms, rss_delta = (time.perf_counter() - t0) * 1000, _rss() - rss0
            j.record_load(mv.slot, load_ms, None)  # the orchestrator stores the memory figure
            j.reached(dep, Step.LOADED, f"fresh copy of version {version} loaded in "
                      f"{load_ms:.0f} ms, RSS {rss_delta / 2**20:+.1f} MiB", on_event)
            j.reached(dep, Step.WARMED, "warm-up ran", on_event)
            try:
                msg = probe_version(mv, settings.probe_timeout_s)
            except AgentError as exc:
                raise _StepFailed(Step.PROBED, exc) from exc
            j.reached(dep, Step.PROBED, msg, on_event)
            try:
                msg = check_loaded_version(mv, settings.probe_timeout_s)
            except AgentError as exc:
                raise _StepFailed(Step.PARITY, exc) from exc
            j.reached(dep, Step.PARITY, msg, on_event)

        try:
            drained = self.plane.reload_version(
                name, version, check=check, drain_timeout_s=settings.drain_timeout_s,
                overrides=overrides)
        except _STEP_ERRORS as exc:
            raise _StepFailed(Step.LOADED, exc) from exc
        j.reached(dep, Step.SWITCHED, "requests now go to the fresh copy", on_event)
        j.reached(dep, Step.DRAINED, "old copy drained" if drained else
                  "old copy still had requests at the drain timeout", on_event)
        j.reached(dep, Step.UNLOADED, "old copy unloaded", on_event)
        return drained

    # ------------------------------------------------------------------ serving state
    def ready(self, name: str, version: int) -> bool:
        """True when ``version`` of ``name`` is loaded and READY."""
        try:
            self.plane.resolve(name, version)
        except AgentError:
            return False
        return True

    def loaded(self, name: str, version: int) -> bool:
        """True when the repository tracks ``version`` of ``name`` (in any state)."""
        return any(mv.version == version for mv in self.plane.versions(name))
