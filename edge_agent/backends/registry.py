"""Which backends exist, which runtimes are installed, and which backend serves a manifest.

Backends are found through the entry-point group ``edge_agent.backends``: each entry names a
:class:`~edge_agent.backends.base.BackendPlugin` (pyproject.toml declares the three built-in
ones), so a new backend is one module and one entry. An entry is loaded only when its backend is
asked about, and runtimes are imported only when a model is loaded, so a device without
OpenVINO or TensorRT still starts and serves its other models.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path

from edge_agent.backends.base import Backend, BackendOptions, BackendPlugin, Cancellation
from edge_agent.config.models import ISOLATION_MODES
from edge_agent.errors import BackendError, RuntimeMissingError
from packager.bundle.manifest import Manifest

ENTRY_POINT_GROUP = "edge_agent.backends"

IN_AGENT_BACKENDS = frozenset({"pipeline"})
"""Backends that always run in the agent's process (a pipeline calls the other models through
the data plane); their steps are isolated as their own models are."""
CALLS_MODELS = IN_AGENT_BACKENDS | {"python"}
"""Backends whose answers may depend on other models' answers (a pipeline's steps, a Python
model's ``ctx.infer``): the response cache keys them by what serves those models too."""


@functools.cache
def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)  # the first distribution on the path wins
    return found


def backend_names() -> tuple[str, ...]:
    """Every backend registered in the ``edge_agent.backends`` group, installed or not."""
    return tuple(sorted(_entry_points()))


@functools.cache
def get_plugin(name: str) -> BackendPlugin:
    """The plugin registered as ``name`` (its module is imported, its runtime is not).

    Raises BackendError naming the registered backends when ``name`` is not one of them.
    """
    ep = _entry_points().get(name)
    if ep is None:
        raise BackendError(
            f"backend {name!r} is unknown: the {ENTRY_POINT_GROUP!r} entry points register "
            f"{', '.join(backend_names()) or 'none (is edgeship installed?)'}; use one of "
            f"them or install the package that provides {name!r}")
    try:
        plugin = ep.load()
    except Exception as exc:
        raise BackendError(f"backend {name!r}: its entry point {ep.value!r} does not load: "
                           f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(plugin, BackendPlugin):
        raise BackendError(f"backend {name!r}: its entry point {ep.value!r} names a "
                           f"{type(plugin).__name__}, not an edge_agent BackendPlugin")
    return plugin


def backend_available(name: str) -> bool:
    """True when ``name`` is registered and its runtime's Python modules are installed."""
    if name not in _entry_points():
        return False
    try:
        return all(importlib.util.find_spec(mod) is not None
                   for mod in get_plugin(name).runtime_modules)
    except (ImportError, ValueError, BackendError):
        return False


def available_backends() -> tuple[str, ...]:
    """The backends whose runtimes are installed here."""
    return tuple(n for n in backend_names() if backend_available(n))


def _candidates(manifest: Manifest, preferred: str | None) -> list[str]:
    order = [preferred] if preferred else [manifest.backend, manifest.fallback_backend]
    return [n for n in dict.fromkeys(order) if n]


def choose_backend(manifest: Manifest, preferred: str | None = None) -> str:
    """The bundle's backend, or its fallback when the primary runtime is missing here.

    ``preferred`` (from agent config) replaces the manifest's choice. Raises
    RuntimeMissingError when none of the candidates can run on this device.
    """
    candidates = _candidates(manifest, preferred)
    for name in candidates:
        if backend_available(name):
            return name
    raise RuntimeMissingError(
        f"model {manifest.name!r} version {manifest.version} needs backend "
        f"{' or '.join(repr(c) for c in candidates)}, but none is usable on this device "
        f"(installed: {', '.join(available_backends()) or 'none'}); install the runtime "
        f"(e.g. pip install edgeship[tensorrt]) or deploy the bundle built for this profile")




def runs_in_process(isolation: str, manifest: Manifest, preferred: str | None = None) -> bool:
    """Whether ``isolation`` puts ``manifest``'s model in runtime processes of its own."""
    if isolation not in ISOLATION_MODES:
        raise BackendError(f"isolation {isolation!r} is unknown; use one of "
                           f"{', '.join(ISOLATION_MODES)}")
    if manifest.backend in IN_AGENT_BACKENDS:
        return False  # it calls the agent's data plane: it lives where the data plane does
    if isolation != "auto":
        return isolation == "process"
    try:
        name = choose_backend(manifest, preferred)
    except RuntimeMissingError:
        return False  # loading in-process reports the missing runtime
    return get_plugin(name).cancellation is Cancellation.NONE


def load_backend(model_dir: Path, manifest: Manifest, options: BackendOptions,
                 preferred: str | None = None, *, isolation: str = "thread") -> Backend:
    """Load ``manifest``'s model from ``model_dir`` on the chosen backend.

    When the primary backend's runtime imports but cannot run here (e.g. TensorRT without a
    GPU, which raises RuntimeMissingError on load) the manifest's fallback is tried next.
    ``isolation`` (one of ISOLATION_MODES) decides whether it runs in runtime processes.
    Raises BackendError for a backend name that no entry point registers.
    """
    if preferred:
        get_plugin(preferred)  # an unknown name in the agent config: say so, do not fall back
    if runs_in_process(isolation, manifest, preferred):
        from edge_agent.backends.isolated import IsolatedBackend

        return IsolatedBackend(model_dir, manifest, options, preferred)
    errors: list[str] = []
    for name in _candidates(manifest, preferred):
        if name not in _entry_points():
            errors.append(f"{name}: unknown backend (registered: {', '.join(backend_names())})")
            continue
        if not backend_available(name):
            errors.append(f"{name}: runtime not installed")
            continue
        try:
            return get_plugin(name).load(Path(model_dir), manifest, options)
        except RuntimeMissingError as exc:
            errors.append(f"{name}: {exc}")
    if not errors:
        raise BackendError(f"model {manifest.name!r} names no backend in its manifest")
    raise RuntimeMissingError(
        f"model {manifest.name!r} version {manifest.version} cannot be served here: "
        + "; ".join(errors)
        + ". Install the runtime or deploy the bundle built for this device's profile")
