"""Which backends exist, which runtimes are installed, and which backend serves a manifest.

Runtimes are imported only when a backend is loaded, so a device without OpenVINO or TensorRT
still starts and serves its other models.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from edge_agent.backends.base import Backend, BackendOptions
from edge_agent.errors import BackendError, RuntimeMissingError
from edge_agent.settings import ISOLATION_MODES
from packager.manifest import Manifest

# backend name -> (module holding ``load``, python modules its runtime needs)
_BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "onnxruntime": ("edge_agent.backends.onnxruntime_backend", ("onnxruntime",)),
    "openvino": ("edge_agent.backends.openvino_backend", ("openvino",)),
    "tensorrt": ("edge_agent.backends.tensorrt_backend", ("tensorrt", "pycuda")),
}


def known_backends() -> tuple[str, ...]:
    """Every backend name the agent knows, installed or not."""
    return tuple(_BACKENDS)


def backend_available(name: str) -> bool:
    """True when ``name`` is known and its runtime's Python modules are installed."""
    entry = _BACKENDS.get(name)
    if entry is None:
        return False
    try:
        return all(importlib.util.find_spec(mod) is not None for mod in entry[1])
    except (ImportError, ValueError):
        return False


def available_backends() -> tuple[str, ...]:
    """The backends whose runtimes are installed here."""
    return tuple(n for n in _BACKENDS if backend_available(n))


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
        if name not in _BACKENDS:
            continue
        if backend_available(name):
            return name
    raise RuntimeMissingError(
        f"model {manifest.name!r} version {manifest.version} needs backend "
        f"{' or '.join(repr(c) for c in candidates)}, but none is usable on this device "
        f"(installed: {', '.join(available_backends()) or 'none'}); install the runtime "
        f"(e.g. pip install edge-toolkit[tensorrt]) or deploy the bundle built for this profile")


# runtimes whose backend can stop a running inference from another thread (``cancel``)
_CANCELLABLE = frozenset({"onnxruntime"})


def runs_in_process(isolation: str, manifest: Manifest, preferred: str | None = None) -> bool:
    """Whether ``isolation`` puts ``manifest``'s model in runtime processes of its own."""
    if isolation not in ISOLATION_MODES:
        raise BackendError(f"isolation {isolation!r} is unknown; use one of "
                           f"{', '.join(ISOLATION_MODES)}")
    carries_bytes = any(t.datatype == "BYTES" for t in (*manifest.inputs, *manifest.outputs))
    if isolation == "process" and carries_bytes:
        raise BackendError(f"model {manifest.name!r} has BYTES tensors, which cannot cross into "
                           "a runtime process; set isolation = \"thread\" for it")
    if isolation != "auto" or carries_bytes:
        return isolation == "process"
    try:
        return choose_backend(manifest, preferred) not in _CANCELLABLE
    except RuntimeMissingError:
        return False  # loading in-process reports the missing runtime


def load_backend(model_dir: Path, manifest: Manifest, options: BackendOptions,
                 preferred: str | None = None, *, isolation: str = "thread") -> Backend:
    """Load ``manifest``'s model from ``model_dir`` on the chosen backend.

    When the primary backend's runtime imports but cannot run here (e.g. TensorRT without a
    GPU, which raises RuntimeMissingError on load) the manifest's fallback is tried next.
    ``isolation`` (one of ISOLATION_MODES) decides whether it runs in runtime processes.
    """
    if runs_in_process(isolation, manifest, preferred):
        from edge_agent.backends.isolated import IsolatedBackend

        return IsolatedBackend(model_dir, manifest, options, preferred)
    errors: list[str] = []
    for name in _candidates(manifest, preferred):
        if name not in _BACKENDS:
            errors.append(f"{name}: unknown backend (known: {', '.join(_BACKENDS)})")
            continue
        if not backend_available(name):
            errors.append(f"{name}: runtime not installed")
            continue
        module = importlib.import_module(_BACKENDS[name][0])
        try:
            backend: Backend = module.load(Path(model_dir), manifest, options)
            return backend
        except RuntimeMissingError as exc:
            errors.append(f"{name}: {exc}")
    if not errors:
        raise BackendError(f"model {manifest.name!r} names no backend in its manifest")
    raise RuntimeMissingError(
        f"model {manifest.name!r} version {manifest.version} cannot be served here: "
        + "; ".join(errors)
        + ". Install the runtime or deploy the bundle built for this device's profile")
