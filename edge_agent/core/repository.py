"""The model repository: extracted bundles under ``<state_dir>/models/NAME/VERSION/``.

Each version is a :class:`VersionSlot` (where it lives, its state); a load (manifest hashes
verified, a backend and a batcher, warm-up) builds its :class:`LoadedVersion` whole, and then it
is READY. The default version of a model is a pinned version when one is configured,
otherwise the highest READY one; it is swapped by replacing one reference, so a request is
always answered wholly by the version it was routed to. ``load_version`` / ``set_default`` /
``unload_version`` are the hot-swap primitives: load the new version next to the old, switch,
then drain and unload the old one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from edge_agent.backends.base import BackendOptions, Host
from edge_agent.backends.registry import IN_AGENT_BACKENDS, load_backend
from edge_agent.config.models import ModelOverrides
from edge_agent.core.batcher import DynamicBatcher
from edge_agent.core.decoupled import DecoupledRunner, is_decoupled
from edge_agent.core.gate import DEFAULT_PRIORITY, ExecutionGate, nice_for
from edge_agent.core.observer import InferenceObserver, NullObserver
from edge_agent.core.overrides import batch_ceiling, effective_batching
from edge_agent.core.sequences import served_instances
from edge_agent.core.tallies import LifecycleTally
from edge_agent.core.triton_wording import unknown_model
from edge_agent.core.validation import Signature
from edge_agent.core.warmup import run_warmup
from edge_agent.errors import AgentError, BackendError, ModelNotFoundError, ModelUnavailableError
from packager.bundle.errors import PackagerError
from packager.bundle.manifest import MANIFEST_NAME, BatchingConfig, Manifest

log = logging.getLogger(__name__)


LoadGuard = Callable[["VersionSlot"], AbstractContextManager[None]]


class ServingState(StrEnum):
    """Where one model version is in serving (names as Triton's repository index reports
    them); the deploy record's state is :class:`edge_agent.state.VersionState`."""

    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    UNLOADING = "UNLOADING"


@dataclass(eq=False)
class VersionSlot:
    """One model version the repository tracks: where it lives and its serving state.
    ``loaded`` is set, whole, when a load succeeds (before the state becomes READY)."""

    name: str
    version: int
    path: Path
    state: ServingState = ServingState.LOADING
    reason: str = ""
    loaded: LoadedVersion | None = None
    last_used: float = 0.0  # time.monotonic() of the last request routed to it


@dataclass(frozen=True, slots=True, eq=False)
class LoadedVersion:
    """A loaded model version as it serves: built whole by one load, never changed (a reload
    builds another). :meth:`ModelRepository.resolve` returns it."""

    name: str
    version: int
    path: Path
    manifest: Manifest  # with the batching it is served with
    backend_name: str
    device: str  # where the backend runs (its ``device``: CPUExecutionProvider, GPU, ...)
    batching: BatchingConfig  # as served: the bundle's with the agent's overrides
    signature: Signature
    batcher: DynamicBatcher
    streamer: DecoupledRunner | None  # a decoupled model's (ModelStreamInfer only)
    response_cache: bool  # answers repeated requests from the response cache
    slot: VersionSlot = field(repr=False)

    def close(self, drain_timeout_s: float) -> bool:
        """Drain its requests (up to ``drain_timeout_s``) and release the backend; True when
        every request was answered in time."""
        drained = self.batcher.close(drain_timeout_s)
        if self.streamer is not None:
            drained = self.streamer.close(drain_timeout_s) and drained
        self.batcher.backend.close()
        return drained


@dataclass(eq=False)
class _Model:
    name: str
    versions: dict[int, VersionSlot] = field(default_factory=dict)
    pinned: int | None = None
    default: LoadedVersion | None = None


def _with_openvino_overrides(manifest: Manifest, ov: ModelOverrides) -> Manifest:
    """``manifest`` with the model's OpenVINO hint and stream count laid over its
    ``backend_options.openvino`` (the backend reads them there, in a runtime process too)."""
    extra = {k: v for k, v in (("performance_hint", ov.openvino_hint),
                               ("num_streams", ov.openvino_streams)) if v is not None}
    if not extra:
        return manifest
    options = dict(manifest.backend_options)
    options["openvino"] = {**options.get("openvino", {}), **extra}
    return dataclasses.replace(manifest, backend_options=options)


def load_manifest(model_dir: Path) -> Manifest:
    """The manifest of an extracted bundle, with every file's size and sha256 checked."""
    from packager.bundle.reader import load_extracted

    return load_extracted(model_dir)


def default_runtime_memory_limit(budget_bytes: int | None) -> int:
    """A runtime process's memory limit when its model sets none: the agent's memory budget,
    else half of the device's memory."""
    if budget_bytes:
        return budget_bytes
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):  # pragma: no cover - every Linux has both
        return 0


class ModelRepository:
    """Loads, serves and unloads model versions found under ``<state_dir>/models``.

    Reads (``resolve``) take no lock; changes are serialized by one lock per repository.
    """

    def __init__(self, state_dir: Path | str, *, observer: InferenceObserver | None = None,
                 overrides: Mapping[str, ModelOverrides] | None = None,
                 default_overrides: ModelOverrides | None = None,
                 drain_timeout_s: float = 30.0, gate: ExecutionGate | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.gate = gate  # every batcher's executions take a slot (pipelines excepted)
        self.models_dir = self.state_dir / "models"
        self._observer = observer or NullObserver()
        self._overrides = dict(overrides or {})
        self._default_overrides = default_overrides or ModelOverrides()
        self._drain_timeout_s = drain_timeout_s
        self._models: dict[str, _Model] = {}
        self._lock = threading.RLock()
        self.host: Host | None = None
        """Given to every backend loaded here (the data plane: nested requests run on it)."""
        self.runtime_memory_limit_bytes = default_runtime_memory_limit(None)
        self.memory_budgeted = False  # the data plane has a memory budget (BackendOptions)
        """Each runtime process's resident-memory limit when a model sets none (the data
        plane sets it from the memory budget)."""
        self.lifecycle = LifecycleTally()
        """Loads (the orchestrator's guard records them) and unloads, per model and reason."""
        self.load_guard: LoadGuard | None = None
        """Entered around every load (the orchestrator: make room in the budget, measure)."""
        self.generation = 0
        """Counts routing changes (a default switched, a version became READY or left): a
        response cached for a model that calls others is keyed by it (core/cache.py)."""
        self.on_change: Callable[[], None] | None = None
        """Called (outside the lock) after a version became READY or UNAVAILABLE, was unloaded
        or the default changed: what serves is then final (the orchestrator's snapshot)."""

    # ------------------------------------------------------------------ disk
    def scan(self) -> dict[str, list[int]]:
        """Model name -> sorted version numbers present on disk."""
        found: dict[str, list[int]] = {}
        if not self.models_dir.is_dir():
            return found
        for model_dir in sorted(self.models_dir.iterdir()):
            if not model_dir.is_dir() or model_dir.name.startswith("."):
                continue
            versions = sorted(int(v.name) for v in model_dir.iterdir()
                              if v.is_dir() and v.name.isdigit())
            if versions:
                found[model_dir.name] = versions
        return found

    def overrides_for(self, name: str) -> ModelOverrides:
        """The agent-config overrides of model ``name``."""
        return self._overrides.get(name, self._default_overrides)

    def set_overrides(self, name: str, overrides: ModelOverrides) -> None:
        """Use ``overrides`` for ``name`` from its next load on (live settings)."""
        with self._lock:
            self._overrides[name] = overrides

    # ------------------------------------------------------------------ lookups
    def resolve(self, name: str, version: int | None = None) -> LoadedVersion:
        """The READY version to serve (the default when ``version`` is None)."""
        model = self._models.get(name)
        if model is None:
            raise ModelNotFoundError(
                f"{unknown_model(name)}; model {name!r} is not in the repository (models: "
                f"{', '.join(sorted(self._models)) or 'none'})")
        if version is None:
            mv = model.default
            if mv is None:
                raise ModelUnavailableError(
                    f"model {name!r} has no READY version ({self._states(model)})")
            return mv
        slot = model.versions.get(version)
        if slot is None:
            raise ModelNotFoundError(
                f"{unknown_model(name, version)}; model {name!r} has no version {version} "
                f"(versions: "
                f"{sorted(model.versions) or 'none'})")
        loaded = slot.loaded
        if slot.state is not ServingState.READY or loaded is None:
            raise ModelUnavailableError(
                f"model {name!r} version {version} is {slot.state.value}"
                + (f": {slot.reason}" if slot.reason else ""))
        return loaded

    def lookup(self, name: str, version: int | None = None) -> VersionSlot:
        """Like ``resolve`` but any state; version None: the default, else the highest known."""
        model = self._models.get(name)
        if model is None:
            raise ModelNotFoundError(f"{unknown_model(name)}; model {name!r} is not in the "
                                     "repository")
        if version is None:
            if model.default is not None:
                return model.default.slot
            if not model.versions:
                raise ModelNotFoundError(f"model {name!r} has no loaded versions")
            return model.versions[max(model.versions)]
        mv = model.versions.get(version)
        if mv is None:
            raise ModelNotFoundError(f"{unknown_model(name, version)}; model {name!r} has no "
                                     f"version {version}")
        return mv

    def versions(self, name: str | None = None) -> list[VersionSlot]:
        """Every version the repository tracks (optionally of one model), by name and version."""
        models = [self._models[name]] if name is not None and name in self._models else (
            [] if name is not None else list(self._models.values()))
        return [mv for m in sorted(models, key=lambda m: m.name)
                for _, mv in sorted(m.versions.items())]

    def model_names(self) -> list[str]:
        return sorted(self._models)

    def default_version(self, name: str) -> int | None:
        """The version requests without one are routed to (None when none is READY)."""
        model = self._models.get(name)
        return model.default.version if model and model.default else None

    # ------------------------------------------------------------------ changes
    def load_all(self, only: Callable[[str, int], bool] | None = None) -> list[VersionSlot]:
        """Load every version on disk (or those ``only(name, version)`` accepts; the model
        manager loads just the active ones); failures leave versions UNAVAILABLE."""
        wanted = [(name, v) for name, versions in self.scan().items() for v in versions
                  if only is None or only(name, v)]
        later = [nv for nv in wanted if self._calls_models(*nv)]
        loaded = [self.load_version(n, v, raise_on_error=False) for n, v in wanted
                  if (n, v) not in later]
        # pipelines after the models they call; one over other pipelines after those
        while later:
            tried = [self.load_version(n, v, raise_on_error=False) for n, v in later]
            ready = [mv for mv in tried if mv.state is ServingState.READY]
            loaded.extend(ready)
            if not ready:
                loaded.extend(tried)
                break
            later = [(mv.name, mv.version) for mv in tried if mv.state is not ServingState.READY]
        return loaded

    def _calls_models(self, name: str, version: int) -> bool:
        """Whether that version on disk is a model that calls other models (a pipeline)."""
        try:
            raw = (self.models_dir / name / str(version) / MANIFEST_NAME).read_bytes()
            return Manifest.from_json(raw).backend in IN_AGENT_BACKENDS
        except (AgentError, PackagerError, OSError):
            return False

    def load_version(self, name: str, version: int, *, raise_on_error: bool = True,
                     model_dir: Path | None = None) -> VersionSlot:
        """Load ``name`` version ``version`` next to the versions already served.

        The default switches to it only if it becomes the highest READY version and no other
        version is pinned. A version that is already READY is returned as is.
        """
        path = Path(model_dir) if model_dir is not None else self.models_dir / name / str(version)
        with self._lock:
            model = self._models.get(name)
            if model is None:
                pinned = self.overrides_for(name).default_version
                model = self._models[name] = _Model(name, pinned=pinned)
            existing = model.versions.get(version)
            if existing is not None and existing.state in (ServingState.READY,
                                                           ServingState.LOADING):
                return existing
            mv = VersionSlot(name=name, version=version, path=path)
            model.versions[version] = mv
        started = time.monotonic()
        try:
            loaded = self._guarded_bring_up(mv)
        except (AgentError, PackagerError, OSError) as exc:
            mv.state = ServingState.UNAVAILABLE
            mv.reason = str(exc)
            log.warning("model %s version %s is unavailable: %s", name, version, exc)
            with self._lock:
                self._refresh_default(model)
            self._changed()
            if raise_on_error:
                if isinstance(exc, AgentError):
                    raise
                raise BackendError(f"model {name!r} version {version}: {exc}") from exc
            return mv
        with self._lock:
            mv.loaded = loaded
            mv.state = ServingState.READY
            self._refresh_default(model)
        log.info("loaded %s version %s on %s (%s) in %.2f s", name, version,
                 loaded.backend_name, loaded.device, time.monotonic() - started)
        self._changed()
        return mv

    def _guarded_bring_up(self, mv: VersionSlot,
                          overrides: ModelOverrides | None = None) -> LoadedVersion:
        if self.load_guard is None:
            return self._bring_up(mv, overrides)
        with self.load_guard(mv):
            return self._bring_up(mv, overrides)

    def _bring_up(self, mv: VersionSlot,
                  overrides: ModelOverrides | None = None) -> LoadedVersion:
        if not mv.path.is_dir():
            raise ModelNotFoundError(f"model {mv.name!r} version {mv.version}: {mv.path} "
                                     f"does not exist")
        manifest = load_manifest(mv.path)
        if manifest.name != mv.name or manifest.version != mv.version:
            raise BackendError(
                f"{mv.path} holds {manifest.name!r} version {manifest.version}, not "
                f"{mv.name!r} version {mv.version}; the directory layout is "
                f"models/NAME/VERSION/")
        ov = overrides if overrides is not None else self.overrides_for(mv.name)
        manifest = _with_openvino_overrides(manifest, ov)
        batching = effective_batching(manifest.batching, ov, batch_ceiling(manifest))
        batching = served_instances(manifest, batching, ov.instances)
        # the backend sizes what depends on the batch (a TensorRT engine) for the served one
        manifest = dataclasses.replace(manifest, batching=batching)
        priority = ov.priority or DEFAULT_PRIORITY
        limit = (ov.memory_limit_mib << 20 if ov.memory_limit_mib
                 else self.runtime_memory_limit_bytes)
        options = BackendOptions(threads=batching.threads, instances=batching.instances,
                                 device=ov.device, state_dir=self.state_dir,
                                 nice=nice_for(priority), memory_limit_bytes=limit,
                                 budgeted=self.memory_budgeted, host=self.host)
        backend = load_backend(mv.path, manifest, options, preferred=ov.backend,
                               isolation=ov.isolation)
        try:
            decoupled = is_decoupled(manifest)
            # a code model (Python, pipeline) says in its manifest whether made-up inputs suit it
            if ov.warmup and not decoupled and manifest.warmup:
                run_warmup(backend, mv.name, mv.version, batching, batching.instances)
            signature = Signature(mv.name, mv.version, manifest.inputs, manifest.outputs,
                                  batching.max_batch_size)
            batcher = DynamicBatcher(backend, model=mv.name, version=mv.version,
                                     config=batching, observer=self._observer,
                                     execution_timeout_s=ov.execution_timeout_s(),
                                     priority=priority, nice=options.nice,
                                     # a pipeline only waits for its steps' executions
                                     gate=None if backend.name in IN_AGENT_BACKENDS
                                     else self.gate)
            streamer = DecoupledRunner(backend, model=mv.name, version=mv.version,
                                       instances=batching.instances,
                                       response_timeout_s=ov.execution_timeout_s()) \
                if decoupled else None
        except BaseException:
            backend.close()
            raise
        return LoadedVersion(
            name=mv.name, version=mv.version, path=mv.path,
            manifest=manifest,
            backend_name=backend.name, device=backend.device, batching=batching,
            signature=signature, batcher=batcher, streamer=streamer,
            # agent.toml's [models.NAME] response_cache when set, else the bundle's opt-in
            response_cache=ov.response_cache if ov.response_cache is not None
            else manifest.response_cache,
            slot=mv)

    def reload_version(self, name: str, version: int, *,
                       check: Callable[[LoadedVersion], None] | None = None,
                       drain_timeout_s: float | None = None,
                       overrides: ModelOverrides | None = None) -> bool:
        """Load a fresh copy of a served version from disk and swap it in atomically.

        ``check`` (e.g. a health probe) runs on the fresh copy before the swap; if it or the
        load raises, the fresh copy is closed and the old one keeps serving. After the swap the
        old copy is drained and closed. Returns True when the old copy drained in time.
        ``overrides`` (live settings): the fresh copy is built with them, and they become the
        model's overrides only when it is swapped in.
        """
        with self._lock:
            model = self._models.get(name)
            old = model.versions.get(version) if model else None
            if model is None or old is None or old.state is not ServingState.READY:
                raise ModelUnavailableError(f"model {name!r} version {version} is not loaded; "
                                            "load it instead of reloading it")
        mv = VersionSlot(name=name, version=version, path=old.path)
        try:
            mv.loaded = self._guarded_bring_up(mv, overrides)
            mv.state = ServingState.READY
            if check is not None:
                check(mv.loaded)
        except BaseException:
            if mv.loaded is not None:
                mv.loaded.close(0)
            raise
        with self._lock:
            if overrides is not None:
                self._overrides[name] = overrides
            model.versions[version] = mv
            old.state = ServingState.UNLOADING
            self._refresh_default(model)
        drained = True
        if old.loaded is not None:
            timeout = self._drain_timeout_s if drain_timeout_s is None else drain_timeout_s
            drained = old.loaded.close(timeout)
        old.state = ServingState.UNAVAILABLE
        old.reason = "replaced by a reload"
        self._changed()
        return drained

    def set_default(self, name: str, version: int | None) -> None:
        """Pin ``version`` as the default of ``name`` (None: highest READY). Atomic for readers."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                raise ModelNotFoundError(f"model {name!r} is not in the repository")
            if version is not None:
                mv = model.versions.get(version)
                if mv is None or mv.state is not ServingState.READY:
                    raise ModelUnavailableError(
                        f"model {name!r} version {version} is not READY; load it before making "
                        f"it the default")
            model.pinned = version
            self._refresh_default(model)
        self._changed()

    def unload_version(self, name: str, version: int, *,
                       drain_timeout_s: float | None = None, reason: str = "requested") -> bool:
        """Stop routing to the version, wait for its in-flight requests, unload it.

        Returns True when every in-flight request was answered before the drain timeout.
        ``reason`` labels the unload in :attr:`lifecycle` ("requested", "evicted", "idle").
        """
        with self._lock:
            model = self._models.get(name)
            mv = model.versions.get(version) if model else None
            if model is None or mv is None:
                raise ModelNotFoundError(f"model {name!r} has no version {version}")
            if mv.state is ServingState.UNLOADING:
                return False
            mv.state = ServingState.UNLOADING
            if model.pinned == version:
                model.pinned = None
            self._refresh_default(model)
        drained = True
        t0 = time.perf_counter()
        try:
            if mv.loaded is not None:
                timeout = self._drain_timeout_s if drain_timeout_s is None else drain_timeout_s
                drained = mv.loaded.close(timeout)
                log.info("unloaded %s version %s%s", name, version,
                         "" if drained else " (requests still in flight at the drain timeout)")
                self.lifecycle.record(name, "unload", reason, time.perf_counter() - t0)
        finally:
            with self._lock:
                model.versions.pop(version, None)
                mv.state = ServingState.UNAVAILABLE
                mv.reason = "unloaded"
                if not model.versions:
                    self._models.pop(name, None)
            self._changed()
        return drained

    def unload_model(self, name: str) -> None:
        """Unload (with draining) every version of ``name``."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                raise ModelNotFoundError(f"model {name!r} is not loaded")
            versions = sorted(model.versions)
        for v in versions:
            self.unload_version(name, v)

    def reload_model(self, name: str, versions: list[int] | None = None) -> None:
        """Bring the served versions of ``name`` in line with the disk: load new or failed
        versions (``versions``: only those), unload the others; READY versions stay."""
        on_disk = self.scan().get(name)
        if versions is not None and on_disk is not None:
            on_disk = [v for v in on_disk if v in versions]
        if on_disk is None and name not in self._models:
            raise ModelNotFoundError(
                f"model {name!r} is not in the repository at {self.models_dir}")
        errors = []
        for v in on_disk or []:
            mv = self.load_version(name, v, raise_on_error=False)
            if mv.state is not ServingState.READY:
                errors.append(f"version {v}: {mv.reason}")
        model = self._models.get(name)
        if model is not None:
            for v in sorted(model.versions):
                if v not in (on_disk or []):
                    self.unload_version(name, v)
        if errors and (name not in self._models or self._models[name].default is None):
            raise ModelUnavailableError(f"model {name!r} could not be loaded: "
                                        + "; ".join(errors))

    def close(self) -> None:
        """Unload every model (draining in-flight requests)."""
        for name in list(self._models):
            with contextlib.suppress(ModelNotFoundError):
                self.unload_model(name)

    # ------------------------------------------------------------------ helpers
    def _changed(self) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change()
        except Exception:  # a report must never fail a load, a switch or an unload
            log.exception("change hook failed")

    def _refresh_default(self, model: _Model) -> None:
        ready = {v: mv.loaded for v, mv in model.versions.items()
                 if mv.state is ServingState.READY and mv.loaded is not None}
        if model.pinned is not None and model.pinned in ready:
            model.default = ready[model.pinned]
        elif ready:
            model.default = ready[max(ready)]
        else:
            model.default = None
        self.generation += 1  # after the switch: a reader of the new count routes anew

    @staticmethod
    def _states(model: _Model) -> str:
        if not model.versions:
            return "no versions loaded"
        return ", ".join(f"version {v} {mv.state.value}" + (f": {mv.reason}" if mv.reason else "")
                         for v, mv in sorted(model.versions.items()))
