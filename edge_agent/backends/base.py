"""The backend interface every runtime plugin implements, and the options it is loaded with."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from packager.manifest import Manifest, TensorSpec


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """How to load one model version.

    ``threads`` 0 lets the runtime decide. ``instances`` is the number of requests the backend
    must be able to run at the same time (``infer`` is called with ``instance`` in
    ``range(instances)``, never twice concurrently with the same index). ``device`` is a
    runtime-specific device name (``"CPU"``, ``"GPU"``, ``"AUTO"``, ``"cuda"``); None picks the
    best present. ``state_dir`` is where a backend may cache compiled engines.
    """

    threads: int = 0
    instances: int = 1
    device: str | None = None
    state_dir: Path | None = None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads_per_instance(threads: int, instances: int) -> int:
    """Runtime threads for each instance: ``threads`` when set (> 0); otherwise the cores this
    process may use split between ``instances`` when there are several, or 0 (the runtime's
    default) for one. Instances then run in parallel on their own cores instead of each
    spreading one execution over every core (docs/performance.md)."""
    if threads > 0:
        return threads
    if instances > 1:
        return max(1, _cores() // instances)
    return 0


@runtime_checkable
class Backend(Protocol):
    """One loaded model version on one runtime."""

    name: str
    """The backend's registry name, e.g. ``"onnxruntime"``."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    device: str
    """The device the model actually runs on (for ModelConfig and logs)."""

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0) -> dict[str, np.ndarray]:
        """Run one (possibly batched) execution; returned arrays are owned by the caller."""
        ...

    def close(self) -> None:
        """Release the runtime's resources. Idempotent."""
        ...


class BackendFactory(Protocol):
    """What a backend module exports: ``load(model_dir, manifest, options) -> Backend``."""

    def __call__(self, model_dir: Path, manifest: Manifest, options: BackendOptions) -> Backend:
        ...


def artifact_path(model_dir: Path, manifest: Manifest, backend: str) -> Path:
    """The entry file ``backend`` loads, resolved inside ``model_dir``."""
    from edge_agent.errors import BackendError

    rel = manifest.artifacts.get(backend)
    if rel is None:
        raise BackendError(
            f"model {manifest.name!r} version {manifest.version} has no {backend!r} artifact; "
            f"the manifest lists {sorted(manifest.artifacts)}")
    path = (Path(model_dir) / rel).resolve()
    if not path.is_file():
        raise BackendError(f"{backend} artifact {path} of model {manifest.name!r} is missing")
    return path
