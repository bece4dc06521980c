"""The deploy / activate / rollback / remove pipeline over one data plane and one state store.

Deploy: received -> verified (arch/runtime fit, signature, every hash) -> staged (extracted
atomically to ``models/NAME/VERSION``) -> loaded and warmed (RSS delta and load time recorded)
-> probed (one real inference on the new version) -> switched (one reference swap: each request
is answered wholly by one version) -> drained (in-flight requests of the old version answered)
-> unloaded -> committed (the active version changes in SQLite in one transaction).

A failure before the switch leaves the old version serving and untouched; the deployment is
recorded as failed with the step and the reason. A crash at any step leaves the store's active
version unchanged, so the next start serves it again (see :meth:`ModelManager.start`). After a
committed deploy a watcher checks the new version's error rate for ``watch_window_s`` and rolls
back by itself (an ``auto-rollback`` deployment, with its reason) when it passes the threshold.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from edge_agent.core.dataplane import DataPlane
from edge_agent.core.repository import ModelVersion
from edge_agent.core.repository import VersionState as Serving
from edge_agent.errors import AgentError, ModelNotFoundError, StateStoreError
from edge_agent.manager import compat
from edge_agent.manager.device import DeviceInfo, detect_device
from edge_agent.manager.errors import (
    DeploymentBusyError,
    InvalidBundleError,
    ManagerError,
    VersionInUseError,
    disk_full,
    is_disk_full,
)
from edge_agent.manager.outcome import DeployOutcome, StepEvent, VersionView
from edge_agent.manager.pause import maybe_pause
from edge_agent.manager.probe import probe_version
from edge_agent.state import (
    Deployment,
    DeploymentKind,
    DeploymentStatus,
    StateStore,
    Step,
    VersionRecord,
    VersionState,
)
from packager.errors import PackagerError
from packager.reader import load_extracted, open_bundle

log = logging.getLogger(__name__)

EventSink = Callable[[StepEvent], None]
_ACTIVATING = (DeploymentKind.DEPLOY, DeploymentKind.ROLLBACK, DeploymentKind.ACTIVATE,
               DeploymentKind.AUTO_ROLLBACK)


@dataclass(frozen=True)
class ManagerSettings:
    """How the manager verifies, keeps and watches versions."""

    trusted_keys: tuple[Path, ...] = ()
    allow_unsigned: bool = False
    keep_versions: int = 3  # per model, on disk (the active and the rollback target always kept)
    watch_window_s: float = 60.0  # after a deploy, how long the error rate is watched
    error_threshold: float = 0.5  # error rate that triggers an automatic rollback
    min_requests: int = 20  # requests needed in the window before the rate counts
    drain_timeout_s: float = 30.0
    probe_timeout_s: float = 30.0
    profile: str | None = None  # the profile this device reports (None: detected)


class _StepFailed(Exception):
    def __init__(self, step: Step, error: BaseException) -> None:
        super().__init__(str(error))
        self.step = step
        self.error = error


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class ModelManager:
    """Owns which version of each model is active; every change goes through the pipeline.

    Call :meth:`start` once (instead of ``DataPlane.load_all``) and :meth:`close` at shutdown.
    Every public method is thread-safe; changes to one model are serialized (a second change
    while one runs gets DeploymentBusyError).
    """

    def __init__(self, dataplane: DataPlane, store: StateStore,
                 settings: ManagerSettings | None = None,
                 device: DeviceInfo | None = None) -> None:
        self.dataplane = dataplane
        self.repository = dataplane.repository
        self.store = store
        self.settings = settings or ManagerSettings()
        self.device = device or detect_device(self.settings.profile)
        self.state_dir = self.repository.state_dir
        self.models_dir = self.repository.models_dir
        self.incoming_dir = self.state_dir / "incoming"
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._generation: dict[str, int] = {}
        self._closed = threading.Event()
        self._watchers: list[threading.Thread] = []
        self.repository.active_version_of = store.active_version

    # ------------------------------------------------------------------ start-up
    def start(self) -> list[str]:
        """Recover from a crash, register versions on disk, load the active versions.

        Returns one line per thing it repaired (for the log). Sets the data plane ready.
        """
        notes = self._clean_partial_files()
        notes += self._undo_interrupted()
        notes += self._register_disk_versions()
        active = self.store.active_versions()
        managed = {m for m, v in active.items() if v is not None}
        self.repository.startup_filter = (
            lambda name, v: name not in managed or active.get(name) == v)
        try:
            self.dataplane.load_all()
        finally:
            self.repository.startup_filter = None
        for mv in self.repository.versions():
            self._record_load(mv, None, None)
        for name in self.repository.model_names():
            v = active.get(name)
            if v is not None and self._ready(name, v):
                self.repository.set_default(name, v)
            elif v is None:
                notes += self._first_activation(name)
            else:
                notes += self._fall_back(name, v)
        return notes

    def _fall_back(self, name: str, broken: int) -> list[str]:
        """The active version failed to load at start-up: go back to the previous one."""
        error = next((mv.reason for mv in self.repository.versions(name)
                      if mv.version == broken), "") or "it did not load"
        target = self.rollback_target(name)
        if target is None:
            return [f"{name} version {broken} failed to load ({error}) and there is no "
                    "earlier version to fall back to"]
        reason = (f"automatic rollback: active version {broken} failed to load at start-up "
                  f"({error})")
        outcome = self.activate(name, target, kind=DeploymentKind.AUTO_ROLLBACK, reason=reason)
        return [reason + (f"; now serving version {target}" if outcome.ok
                          else f"; falling back to {target} failed too: {outcome.message}")]

    def _clean_partial_files(self) -> list[str]:
        notes = []
        if self.incoming_dir.exists():
            for p in self.incoming_dir.iterdir():
                with contextlib.suppress(OSError):
                    p.unlink() if p.is_file() else shutil.rmtree(p)
                notes.append(f"removed an unfinished upload {p.name}")
        if self.models_dir.is_dir():
            for model_dir in self.models_dir.iterdir():
                if not model_dir.is_dir():
                    continue
                for p in model_dir.iterdir():
                    if p.name.startswith("."):
                        shutil.rmtree(p, ignore_errors=True)
                        notes.append(f"removed a half-extracted {model_dir.name}/{p.name}")
        return notes

    def _undo_interrupted(self) -> list[str]:
        notes = []
        for dep in self.store.recovered:
            notes.append(f"deployment {dep.id} ({dep.kind} of {dep.model} version "
                         f"{dep.to_version}) was interrupted at {dep.last_step}; "
                         f"version {dep.from_version} stays active")
            if dep.kind is not DeploymentKind.DEPLOY or dep.to_version is None:
                continue
            if self.store.active_version(dep.model) == dep.to_version:
                continue
            if self._ever_committed(dep.model, dep.to_version):
                continue
            self._delete_version_files(dep.model, dep.to_version)
            if self.store.version(dep.model, dep.to_version) is not None:
                self.store.remove_version(dep.model, dep.to_version)
            notes.append(f"removed {dep.model} version {dep.to_version} staged by the "
                         "interrupted deployment")
        return notes

    def _ever_committed(self, model: str, version: int) -> bool:
        return any(d.status is DeploymentStatus.COMMITTED and d.kind in _ACTIVATING
                   and d.to_version == version for d in self.store.history(model, 1000))

    def _register_disk_versions(self) -> list[str]:
        notes = []
        on_disk = self.repository.scan()
        for name, versions in on_disk.items():
            for v in versions:
                if self.store.version(name, v) is None:
                    path = self.models_dir / name / str(v)
                    self.store.upsert_version(VersionRecord(
                        name, v, str(path), compat.manifest_sha(path), _dir_size(path)))
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

    def _first_activation(self, name: str) -> list[str]:
        v = self.repository.default_version(name)
        if v is None:
            return []
        dep = self.store.begin_deployment(name, DeploymentKind.ACTIVATE, to_version=v)
        self.store.commit_deployment(dep, f"version {v} found on disk at start-up")
        self.repository.set_default(name, v)
        return [f"activated {name} version {v} (found on disk)"]

    # ------------------------------------------------------------------ queries
    def versions(self, model: str | None = None) -> list[VersionView]:
        """Every version on disk (of one model, or all), with serving state and load figures."""
        active = self.store.active_versions()
        loaded = {(mv.name, mv.version): mv for mv in self.repository.versions()}
        out = []
        for rec in self.store.versions(model):
            mv = loaded.get((rec.model, rec.version))
            manifest = mv.manifest if mv is not None else None
            profile = backend = ""
            if manifest is not None:
                profile, backend = manifest.profile, mv.backend_name  # type: ignore[union-attr]
            else:
                with contextlib.suppress(PackagerError, OSError):
                    m = load_extracted(Path(rec.path), verify_hashes=False)
                    profile, backend = m.profile, m.backend
            state = mv.state.value if mv is not None else Serving.UNAVAILABLE.value
            error = rec.load_error or (mv.reason if mv is not None and mv.state
                                       is Serving.UNAVAILABLE else "")
            out.append(VersionView(
                model=rec.model, version=rec.version,
                active=active.get(rec.model) == rec.version, state=state,
                stored_state=rec.state.value, profile=profile, backend=backend,
                load_ms=rec.load_ms, rss_delta_bytes=rec.rss_delta_bytes, load_error=error or "",
                size_bytes=rec.size_bytes, added_at=rec.added_at))
        return out

    def history(self, model: str | None = None, limit: int = 50) -> list[Deployment]:
        """Deployments, newest first."""
        return self.store.history(model, limit)

    def rollback_target(self, model: str) -> int | None:
        """The version a rollback returns to: the one active before the current one."""
        active = self.store.active_version(model)
        if active is None:
            return None
        usable = {r.version for r in self.store.versions(model)
                  if r.state is not VersionState.FAILED and r.version != active}
        for dep in self.store.history(model, 1000):
            if (dep.status is DeploymentStatus.COMMITTED and dep.kind in _ACTIVATING
                    and dep.to_version == active):
                if dep.from_version in usable:
                    return dep.from_version
                break
        older = sorted(v for v in usable if v < active)
        return older[-1] if older else None

    # ------------------------------------------------------------------ changes
    def new_upload_path(self) -> Path:
        """A fresh file under ``STATE_DIR/incoming/`` to receive an upload into."""
        self.incoming_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self.incoming_dir / f"upload-{secrets.token_hex(8)}.edgepkg"

    def deploy(self, bundle_path: Path, *, force: bool = False,
               on_event: EventSink | None = None, source: str | None = None) -> DeployOutcome:
        """Run the whole pipeline for one bundle file; the outcome says how far it got.

        ``force`` reloads a version that is already active (same content). ``source`` is the
        name the user knows the bundle by (the uploaded file's name): messages say it instead
        of the agent's internal upload path. Raises only for a file that is not a bundle and
        for a model that is busy; step failures are outcomes.
        """
        try:
            reader = open_bundle(Path(bundle_path), label=compat.display_name(source))
        except PackagerError as exc:
            raise InvalidBundleError(f"the upload is not a valid bundle: {exc}") from None
        with reader:
            m = reader.manifest
            with self._model_lock(m.name):
                active = self.store.active_version(m.name)
                dep = self._begin(m.name, DeploymentKind.DEPLOY, m.version, active)
                step = Step.RECEIVED
                try:
                    size = Path(bundle_path).stat().st_size
                    self._reached(dep, Step.RECEIVED, f"{size} bytes: {m.name} version "
                                  f"{m.version} for {m.profile}", on_event)
                    step = Step.VERIFIED
                    backend = compat.check_fits(m, self.device)
                    key = compat.check_signature(
                        reader.manifest_bytes, m, reader.signature, self.settings.trusted_keys,
                        self.settings.allow_unsigned, label=reader.label)
                    try:
                        reader.verify_files()
                    except PackagerError as exc:
                        raise InvalidBundleError(str(exc)) from None
                    signed = f"signed by key {key}" if key else "unsigned (allowed here)"
                    self._reached(dep, Step.VERIFIED, f"{signed}; every file hash matches; "
                                  f"served by {backend}", on_event)
                    step = Step.STAGED
                    note = self._stage(reader, m.name, m.version, active, force)
                    self._reached(dep, Step.STAGED, note, on_event)
                except (AgentError, PackagerError, OSError) as exc:
                    return self._failed(dep, step, exc, on_event)
                return self._switch(dep, m.name, m.version, active, on_event,
                                    reload=force and m.version == active)

    def _stage(self, reader, name: str, version: int, active: int | None, force: bool) -> str:
        target = self.models_dir / name / str(version)
        sha = hashlib.sha256(reader.manifest_bytes).hexdigest()
        if compat.check_version_slot(self.models_dir, name, version, sha, active, force):
            note = f"version {version} already on disk with the same content"
        else:
            compat.check_disk_space(target.parent, compat.extracted_bytes(reader.manifest),
                                    f"extract {name} version {version}")
            try:
                reader.extract(target)
            except (PackagerError, OSError) as exc:
                if is_disk_full(exc):
                    raise disk_full(f"extract {name} version {version}", target.parent) from exc
                raise
            note = f"extracted to {target}"
        self.store.upsert_version(VersionRecord(name, version, str(target), sha,
                                                _dir_size(target), VersionState.STAGED))
        return note

    def activate(self, model: str, version: int, *, force: bool = False,
                 on_event: EventSink | None = None,
                 kind: DeploymentKind = DeploymentKind.ACTIVATE,
                 reason: str = "") -> DeployOutcome:
        """Make ``version`` (on disk) active through warm-up, probe and switch.

        ``force`` with the active version reloads it from disk (a fresh copy, swapped in).
        """
        with self._model_lock(model):
            active = self.store.active_version(model)
            rec = self.store.version(model, version)
            if rec is None:
                have = [r.version for r in self.store.versions(model)]
                raise ModelNotFoundError(f"{model} has no version {version} on this device "
                                         f"(versions on disk: {have or 'none'})")
            if version == active and not force:
                raise VersionInUseError(f"{model} version {version} is already active; pass "
                                        "force to reload it")
            dep = self._begin(model, kind, version, active)
            if reason:
                self._reached(dep, Step.RECEIVED, reason, on_event)
            return self._switch(dep, model, version, active, on_event,
                                reload=version == active, reason=reason)

    def rollback(self, model: str, to_version: int | None = None, *,
                 on_event: EventSink | None = None) -> DeployOutcome:
        """Switch back to the previous version (or ``to_version``), still on disk."""
        target = to_version if to_version is not None else self.rollback_target(model)
        if target is None:
            active = self.store.active_version(model)
            if active is None:
                raise ModelNotFoundError(f"{model} has no active version to roll back from")
            raise ManagerError(f"{model} has no earlier version on this device to roll back "
                               f"to (active: {active})")
        return self.activate(model, target, on_event=on_event, kind=DeploymentKind.ROLLBACK)

    def remove(self, model: str, version: int) -> DeployOutcome:
        """Delete a version that is not active from memory and disk."""
        with self._model_lock(model):
            if self.store.active_version(model) == version:
                raise VersionInUseError(f"{model} version {version} is active; activate or "
                                        "roll back to another version first")
            if self.store.version(model, version) is None:
                raise ModelNotFoundError(f"{model} has no version {version} on this device")
            dep = self._begin(model, DeploymentKind.REMOVE, version, None)
            if self._loaded(model, version):
                self.repository.unload_version(model, version,
                                               drain_timeout_s=self.settings.drain_timeout_s)
                self._reached(dep, Step.UNLOADED, f"version {version} unloaded", None)
            self._delete_version_files(model, version)
            done = self.store.commit_deployment(dep, f"version {version} removed from disk")
            return DeployOutcome(done, True, done.reason, self.store.active_version(model))

    def close(self) -> None:
        """Stop the error-rate watchers."""
        self._closed.set()
        for t in self._watchers:
            t.join(5)

    # ------------------------------------------------------------------ the shared tail
    def _switch(self, dep: int, name: str, version: int, previous: int | None,
                on_event: EventSink | None, *, reload: bool,
                reason: str = "") -> DeployOutcome:
        """Load, warm, probe, switch, drain, unload, commit (the caller holds the model lock)."""
        step = Step.LOADED
        loaded_here = False
        try:
            if previous is not None and previous != version and self._ready(name, previous):
                self.repository.set_default(name, previous)  # loading must not switch
            self.store.set_version_state(name, version, VersionState.LOADING)
            if reload:
                self._reload(dep, name, version, on_event)
            else:
                loaded_here = self._load(dep, name, version, on_event)
                step = Step.PROBED
                mv = self.repository.resolve(name, version)
                msg = probe_version(mv, self.settings.probe_timeout_s)
                self._reached(dep, Step.PROBED, msg, on_event)
        except _StepFailed as failure:
            return self._failed(dep, failure.step, failure.error, on_event, name, version)
        except (AgentError, PackagerError, OSError) as exc:
            if loaded_here:
                with contextlib.suppress(AgentError):
                    self.repository.unload_version(name, version, drain_timeout_s=5)
            return self._failed(dep, step, exc, on_event, name, version)
        if not reload:
            self.repository.set_default(name, version)
            self._reached(dep, Step.SWITCHED, f"requests now go to version {version}"
                          + (f" (was {previous})" if previous is not None else ""), on_event)
            if previous is not None and previous != version and self._loaded(name,
                                                                               previous):
                drained = self.repository.unload_version(
                    name, previous, drain_timeout_s=self.settings.drain_timeout_s)
                self._reached(dep, Step.DRAINED, (
                    f"in-flight requests of version {previous} answered" if drained else
                    f"version {previous} still had requests after "
                    f"{self.settings.drain_timeout_s:.0f} s; they were refused"), on_event)
                with contextlib.suppress(StateStoreError):
                    self.store.set_version_state(name, previous, VersionState.UNLOADED)
                self._reached(dep, Step.UNLOADED, f"version {previous} unloaded; kept on "
                              "disk for rollback", on_event)
            else:
                self._reached(dep, Step.DRAINED, "no previous version in memory", on_event)
                self._reached(dep, Step.UNLOADED, "nothing to unload", on_event)
        message = reason or (f"version {version} is active" + (
            f" (was {previous})" if previous is not None and previous != version else ""))
        done = self.store.commit_deployment(dep, message)
        if on_event is not None:
            on_event(StepEvent(dep, Step.COMMITTED.value, True, message))
        kind = done.kind
        pruned = self._prune(name) if kind is DeploymentKind.DEPLOY else []
        if pruned:
            log.info("pruned %s versions %s (keep_versions=%d)", name, pruned,
                     self.settings.keep_versions)
        if (kind is DeploymentKind.DEPLOY and previous is not None and previous != version
                and self.settings.watch_window_s > 0):
            self._watch(name, version, previous, dep)
        return DeployOutcome(done, True, message, version)

    def _load(self, dep: int, name: str, version: int, on_event: EventSink | None) -> bool:
        if self._ready(name, version):
            self._reached(dep, Step.LOADED, f"version {version} was already loaded", on_event)
            self._reached(dep, Step.WARMED, "already warm", on_event)
            return False
        if self._loaded(name, version):  # a failed earlier attempt is still listed
            with contextlib.suppress(AgentError):
                self.repository.unload_version(name, version, drain_timeout_s=0)
        rss0, t0 = _rss(), time.perf_counter()
        try:
            mv = self.repository.load_version(name, version)
        except (AgentError, PackagerError, OSError) as exc:
            raise _StepFailed(Step.LOADED, exc) from exc
        load_ms, rss_delta = (time.perf_counter() - t0) * 1000, _rss() - rss0
        self._record_load(mv, load_ms, rss_delta)
        self._reached(dep, Step.LOADED, f"{mv.backend_name} backend loaded and warmed up in "
                      f"{load_ms:.0f} ms, RSS {rss_delta / 2**20:+.1f} MiB", on_event)
        instances = mv.batching.instances if mv.batching else 1
        self._reached(dep, Step.WARMED, f"warm-up ran on {instances} instance(s)", on_event)
        return True

    def _reload(self, dep: int, name: str, version: int, on_event: EventSink | None) -> bool:
        rss0, t0 = _rss(), time.perf_counter()

        def check(mv: ModelVersion) -> None:
            load_ms, rss_delta = (time.perf_counter() - t0) * 1000, _rss() - rss0
            self._record_load(mv, load_ms, rss_delta)
            self._reached(dep, Step.LOADED, f"fresh copy of version {version} loaded in "
                          f"{load_ms:.0f} ms, RSS {rss_delta / 2**20:+.1f} MiB", on_event)
            self._reached(dep, Step.WARMED, "warm-up ran", on_event)
            try:
                msg = probe_version(mv, self.settings.probe_timeout_s)
            except AgentError as exc:
                raise _StepFailed(Step.PROBED, exc) from exc
            self._reached(dep, Step.PROBED, msg, on_event)

        try:
            drained = self.repository.reload_version(
                name, version, check=check, drain_timeout_s=self.settings.drain_timeout_s)
        except (AgentError, PackagerError, OSError) as exc:
            raise _StepFailed(Step.LOADED, exc) from exc
        self._reached(dep, Step.SWITCHED, "requests now go to the fresh copy", on_event)
        self._reached(dep, Step.DRAINED, "old copy drained" if drained else
                      "old copy still had requests at the drain timeout", on_event)
        self._reached(dep, Step.UNLOADED, "old copy unloaded", on_event)
        return drained

    # ------------------------------------------------------------------ helpers
    def _begin(self, model: str, kind: DeploymentKind, to_version: int,
               from_version: int | None) -> int:
        self._generation[model] = self._generation.get(model, 0) + 1
        try:
            return self.store.begin_deployment(model, kind, to_version=to_version,
                                               from_version=from_version)
        except StateStoreError as exc:
            raise DeploymentBusyError(str(exc)) from None

    def _reached(self, dep: int, step: Step, message: str, on_event: EventSink | None) -> None:
        self.store.record_step(dep, step, message)
        if on_event is not None:
            on_event(StepEvent(dep, step.value, True, message))
        maybe_pause(step.value, self.state_dir)

    def _failed(self, dep: int, step: Step, exc: BaseException, on_event: EventSink | None,
                name: str | None = None, version: int | None = None) -> DeployOutcome:
        text = str(exc)
        reason = f"{step.value} failed: {text}"
        if name is not None and version is not None:
            with contextlib.suppress(StateStoreError):
                self.store.set_version_state(name, version, VersionState.FAILED,
                                             load_error=text)
        done = self.store.fail_deployment(dep, reason, failed_step=step)
        if on_event is not None:
            on_event(StepEvent(dep, step.value, False, text))
        log.warning("deployment %d failed: %s", dep, reason)
        return DeployOutcome(done, False, reason, self.store.active_version(done.model))

    def _record_load(self, mv: ModelVersion, load_ms: float | None,
                     rss_delta: int | None) -> None:
        state = VersionState.READY if mv.state is Serving.READY else VersionState.FAILED
        with contextlib.suppress(StateStoreError):
            self.store.set_version_state(mv.name, mv.version, state, load_ms=load_ms,
                                         rss_delta_bytes=rss_delta,
                                         load_error=None if state is VersionState.READY
                                         else mv.reason)

    def _ready(self, name: str, version: int) -> bool:
        try:
            self.repository.resolve(name, version)
        except AgentError:
            return False
        return True

    def _loaded(self, name: str, version: int) -> bool:
        return any(mv.version == version for mv in self.repository.versions(name))

    def _delete_version_files(self, model: str, version: int) -> None:
        target = self.models_dir / model / str(version)
        if target.exists():
            doomed = target.with_name(f".{version}.removing-{secrets.token_hex(4)}")
            target.rename(doomed)  # one atomic step: the version is gone from the layout
            shutil.rmtree(doomed, ignore_errors=True)

    def _prune(self, model: str) -> list[int]:
        keep_n = max(1, self.settings.keep_versions)
        active = self.store.active_version(model)
        target = self.rollback_target(model)
        records = self.store.versions(model)
        recs = sorted((r.version for r in records), reverse=True)
        usable = [r.version for r in sorted(records, key=lambda r: -r.version)
                  if r.state is not VersionState.FAILED]  # failed versions go first
        keep = set(usable[:keep_n]) | {v for v in (active, target) if v is not None}
        pruned = []
        for v in recs:
            if v in keep or self._loaded(model, v):
                continue
            self._delete_version_files(model, v)
            self.store.remove_version(model, v)
            pruned.append(v)
        return pruned

    @contextlib.contextmanager
    def _model_lock(self, model: str) -> Iterator[None]:
        with self._locks_guard:
            lock = self._locks.setdefault(model, threading.Lock())
        if not lock.acquire(blocking=False):
            raise DeploymentBusyError(f"a deployment of {model!r} is in progress; wait for it "
                                      "to finish")
        try:
            yield
        finally:
            lock.release()

    # ------------------------------------------------------------------ auto-rollback
    def _watch(self, model: str, version: int, previous: int, dep: int) -> None:
        generation = self._generation.get(model, 0)
        t = threading.Thread(target=self._watch_loop, args=(model, version, previous, dep,
                                                             generation),
                             name=f"edge-watch-{model}-v{version}", daemon=True)
        self._watchers = [w for w in self._watchers if w.is_alive()] + [t]
        t.start()

    def _stats(self, model: str, version: int) -> tuple[int, int] | None:
        try:
            mv = self.repository.resolve(model, version)
        except AgentError:
            return None
        s = mv.batcher.snapshot_stats()  # type: ignore[union-attr]
        return s.success.count, s.fail.count

    def _watch_loop(self, model: str, version: int, previous: int, dep: int,
                    generation: int) -> None:
        s = self.settings
        base = self._stats(model, version)
        deadline = time.monotonic() + s.watch_window_s
        started = time.monotonic()
        while base is not None and not self._closed.wait(0.2):
            if self._generation.get(model) != generation:
                return  # another deployment of the model took over
            now = self._stats(model, version)
            if now is None:
                return
            ok, failed = now[0] - base[0], now[1] - base[1]
            total = ok + failed
            if total >= s.min_requests and failed / total > s.error_threshold:
                reason = (f"automatic rollback: version {version} failed {failed} of {total} "
                          f"requests ({failed / total:.0%}, threshold {s.error_threshold:.0%}) "
                          f"within {time.monotonic() - started:.1f} s of deployment {dep}")
                log.warning("%s: %s", model, reason)
                try:
                    self.activate(model, previous, kind=DeploymentKind.AUTO_ROLLBACK,
                                  reason=reason)
                except AgentError as exc:
                    log.error("automatic rollback of %s failed: %s", model, exc)
                return
            if time.monotonic() >= deadline:
                return


def names_of(versions: Sequence[VersionView]) -> list[str]:
    """``name:version`` of the active versions (for the mDNS TXT record)."""
    return [f"{v.model}:{v.version}" for v in versions if v.active]
