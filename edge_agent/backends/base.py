"""The backend contract: what every runtime plugin implements, how it is found and loaded.

A backend is one module exporting a :class:`BackendPlugin` and one entry point naming it in the
group ``edge_agent.backends`` (pyproject.toml); :mod:`edge_agent.backends.registry` finds it
there. Everything the batcher relies on is declared here: ``infer`` on an instance slot,
``cancel`` of one execution by its identity, and the :class:`Cancellation` capability.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from edge_agent.config.device_bounds import usable_cores
from packager.bundle.manifest import Manifest, TensorSpec


@dataclass(frozen=True, slots=True)
class HostedModel:
    """What a host tells a backend about another model it serves."""

    manifest: Manifest
    """The served version's manifest (its batching as the agent serves it)."""
    decoupled: bool
    """Whether the model streams its responses (it answers no single request)."""


class Host(Protocol):
    """What a backend may ask of whoever hosts it (the agent's serving core): the only way a
    backend reaches other models. Given at load in :attr:`BackendOptions.host`; every method is
    thread-safe and may be called from inside an execution."""

    def infer(self, model: str, inputs: dict[str, np.ndarray], version: int | None = None,
              outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Run ``inputs`` on ``model`` (its active version, or ``version``) as a client's
        request would run, and return its outputs (all, or those named in ``outputs``).
        Raises the agent's AgentError subclasses (unknown model, bad input, failure)."""
        ...

    def submit(self, model: str, inputs: dict[str, np.ndarray], version: int | None = None,
               outputs: list[str] | None = None) -> Future[dict[str, np.ndarray]]:
        """Start the request :meth:`infer` would run, never on the calling thread, and return
        at once; the future holds its outputs or its AgentError. Wait for it inside
        :meth:`waiting`."""
        ...

    def stream(self, model: str, inputs: dict[str, np.ndarray],
               version: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """The responses of decoupled ``model`` to ``inputs``, produced as they are taken
        (a model that is not decoupled gives its one answer); closing it early stops the
        model's generator."""
        ...

    def waiting(self) -> AbstractContextManager[None]:
        """The calling execution gives its execution slot up while the body waits for calls
        it submitted (so that they may run on it)."""
        ...

    def model_config(self, model: str, version: int | None = None) -> HostedModel:
        """How ``model`` (its active version, or ``version``) is served. Raises
        ModelNotFoundError or ModelUnavailableError when it is not."""
        ...


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """How to load one model version.

    ``threads`` 0 lets the runtime decide. ``instances`` is the number of requests the backend
    must be able to run at the same time (``infer`` is called with ``instance`` in
    ``range(instances)``, never twice concurrently with the same index). ``device`` is a
    runtime-specific device name (``"CPU"``, ``"GPU"``, ``"AUTO"``, ``"cuda"``); None picks the
    best present. ``state_dir`` is where a backend may cache compiled engines. ``nice`` is the
    OS nice value of the runtime processes of an isolated backend (0: the agent's). ``host``
    is the agent serving the model, for backends that call other models (None: loaded alone,
    e.g. by ``edge-agent check``). ``memory_limit_bytes`` bounds the resident memory of each
    runtime process of an isolated backend, its children included (0: no limit).
    ``budgeted``: the agent has a memory budget, so a backend keeps one copy of the weights
    and no memory between executions that it can give back (ONNX Runtime:
    ``packager.bundle.ort_memory.keep_one_copy``: no CPU memory arena, which otherwise keeps
    the activations of the largest batch run, no prepacked or re-laid-out weight copies);
    runtime processes get it too.
    """

    threads: int = 0
    instances: int = 1
    device: str | None = None
    state_dir: Path | None = None
    nice: int = 0
    memory_limit_bytes: int = 0
    budgeted: bool = False
    host: Host | None = field(default=None, compare=False, repr=False)


def threads_per_instance(threads: int, instances: int) -> int:
    """Runtime threads for each instance: ``threads`` when set (> 0); otherwise the cores this
    process may use split between ``instances`` when there are several, or 0 (the runtime's
    default) for one. Instances then run in parallel on their own cores instead of each
    spreading one execution over every core (docs/performance.md)."""
    if threads > 0:
        return threads
    if instances > 1:
        return max(1, usable_cores() // instances)
    return 0


class Cancellation(enum.Enum):
    """What a backend's ``cancel`` does to a running execution."""

    NONE = "none"
    """The runtime cannot stop a running inference: the instance stays busy until it returns."""
    TERMINATE = "terminate"
    """The runtime stops the run (it raises) and the instance serves the next execution."""
    KILL = "kill"
    """The instance's runtime process is killed and a new one replaces it."""


@runtime_checkable
class Backend(Protocol):
    """One loaded model version on one runtime.

    Executions carry an identity: the batcher numbers them (1, 2, ... per batcher; 0 means
    none) and passes the number to ``infer``, and ``cancel`` stops an execution only by that
    number, so a cancel that arrives late can never stop the execution that runs next on the
    same instance.
    """

    name: str
    """The backend's registry name, e.g. ``"onnxruntime"``."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    device: str
    """The device the model actually runs on (for ModelConfig and logs)."""
    cancellation: Cancellation
    """What ``cancel`` does; NONE when it does nothing."""

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        """Run one (possibly batched) execution numbered ``execution`` on ``instance``;
        returned arrays are owned by the caller."""
        ...

    def cancel(self, instance: int, execution: int) -> bool:
        """Stop ``execution`` if it is running on ``instance`` now (called from another
        thread; returns promptly). Never touches any other execution. True when it was
        running and is being stopped (its ``infer`` raises); False when it is not running
        (not started yet, or finished) or the backend cannot cancel."""
        ...

    def close(self) -> None:
        """Release the runtime's resources. Idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class BackendPlugin:
    """What a backend module exports under the name its ``edge_agent.backends`` entry point
    gives. The module must import without its runtime (the runtime is imported by ``load``),
    so that a device without that runtime still starts."""

    load: Callable[[Path, Manifest, BackendOptions], Backend]
    """Load a model version from its directory: ``load(model_dir, manifest, options)``."""
    runtime_modules: tuple[str, ...]
    """Python modules the runtime needs; the backend is usable here when all are installed."""
    cancellation: Cancellation
    """What the loaded backend's ``cancel`` does in the agent's process."""


class RunningExecutions:
    """Which execution each instance runs now, for a backend whose ``cancel`` must match it.

    ``begin``/``end`` bracket one execution on the running thread (lock-free: two list
    stores, plus a lock wait only while a ``cancel`` of this backend is in progress);
    ``cancel`` runs ``stop`` under a lock only while the execution it names is between them.
    ``end`` returns True when a cancel stopped that execution, even one that finished before
    its stop took effect, so that the backend can drop whatever the stop spoiled (a terminated
    RunOptions, a killed process) before the instance runs again.
    """

    __slots__ = ("_hit", "_lock", "_running")

    def __init__(self, instances: int) -> None:
        self._running = [0] * max(1, instances)
        self._hit = [False] * max(1, instances)
        self._lock = threading.Lock()

    def begin(self, instance: int, execution: int) -> None:
        self._running[instance] = execution

    def end(self, instance: int) -> bool:
        self._running[instance] = 0
        if self._lock.locked():  # a cancel may have read this execution: let it finish
            with self._lock:
                pass
        if self._hit[instance]:
            self._hit[instance] = False
            return True
        return False

    def cancel(self, instance: int, execution: int, stop: Callable[[], object]) -> bool:
        with self._lock:
            if not execution or not 0 <= instance < len(self._running) \
                    or self._running[instance] != execution:
                return False
            self._hit[instance] = True
            stop()
            return True


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
