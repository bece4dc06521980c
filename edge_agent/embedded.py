"""Serve models inside a Python app's own process: no agent, no server, no gRPC.

The same repository, dynamic batcher, backends (and runtime processes for isolated ones) and
execution gate as the agent, opened on a bundle or on an agent's state directory::

    from edge_agent import embedded

    with embedded.open_bundle("mlp-1-x86_64-cpu-openvino.edgepkg",
                              trusted_keys=["keys/edge-pack.pub"]) as rt:
        probs = rt.infer("mlp", {"input": frame})["probs"]

    with embedded.open_state_dir("/var/lib/edge-agent",
                                 config="/etc/edge-agent/agent.toml") as rt:
        ...

Signatures are checked as the agent checks a deploy: against ``trusted_keys``; an unsigned
bundle is refused unless ``allow_unsigned`` (which never admits a bundle that carries code:
a Python model runs only when a trusted key signed it). Threads calling :meth:`infer` at once
share batches, as the agent's callers do. Errors are :mod:`edge_agent.errors` classes
(InvalidInputError for a wrong dtype or shape, ModelNotFoundError for an unknown model, ...);
a refused bundle or unreadable state directory is :class:`EmbeddedOpenError`. See
docs/embedded.md.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType

import numpy as np

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.repository import ServingState
from edge_agent.core.types import InferRequest, InferResult, ModelMetadata, ModelStats
from edge_agent.errors import AgentError
from packager.bundle.errors import PackagerError

__all__ = ["EmbeddedOpenError", "EmbeddedRuntime", "open_bundle", "open_state_dir"]

log = logging.getLogger(__name__)

KeyPaths = Sequence[str | Path]


class EmbeddedOpenError(AgentError):
    """A bundle or state directory could not be opened: refused signature, corrupt or missing
    files, no state database, or a model that failed to load. The message says which."""


class EmbeddedRuntime:
    """Models served in this process. Thread-safe; close it (or use ``with``) to unload them
    and stop their runtime processes."""

    def __init__(self, plane: DataPlane, scratch: Path | None = None) -> None:
        self._plane = plane
        self._scratch = scratch  # a private state directory removed at close
        self._closed = False

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], *,
              version: int | None = None, outputs: Sequence[str] | None = None,
              priority: int = 0, timeout_s: float | None = None) -> dict[str, np.ndarray]:
        """Run one request (``inputs`` by input name, the batch dimension first when the model
        batches) and return its outputs by name. ``version`` None: the active version;
        ``priority`` 1 is the highest (0: the model's). Raises AgentError subclasses."""
        return self.infer_result(model, inputs, version=version, outputs=outputs,
                                 priority=priority, timeout_s=timeout_s).outputs

    def infer_result(self, model: str, inputs: Mapping[str, np.ndarray], *,
                     version: int | None = None, outputs: Sequence[str] | None = None,
                     priority: int = 0, timeout_s: float | None = None) -> InferResult:
        """Like :meth:`infer`, with the version that answered."""
        return self._plane.infer(self._request(model, inputs, version, outputs, priority),
                                 timeout_s)

    def submit(self, model: str, inputs: Mapping[str, np.ndarray], *,
               version: int | None = None, outputs: Sequence[str] | None = None,
               priority: int = 0) -> Future[InferResult]:
        """Queue one request and return a future (for asyncio: ``asyncio.wrap_future``).
        Invalid requests raise at once; execution failures are set on the future."""
        return self._plane.submit(self._request(model, inputs, version, outputs, priority))

    def _request(self, model: str, inputs: Mapping[str, np.ndarray], version: int | None,
                 outputs: Sequence[str] | None, priority: int) -> InferRequest:
        if self._closed:
            raise EmbeddedOpenError("this embedded runtime is closed; open it again")
        return InferRequest(model=model, inputs=dict(inputs), version=version,
                            outputs=list(outputs) if outputs is not None else None,
                            priority=priority)

    def models(self) -> list[str]:
        """The models with a version ready to serve."""
        return [m for m in self._plane.repository.model_names() if self._plane.model_ready(m)]

    def metadata(self, model: str, version: int | None = None) -> ModelMetadata:
        """Inputs, outputs, versions and batching of ``model``."""
        return self._plane.model_metadata(model, version)

    def statistics(self, model: str | None = None) -> list[ModelStats]:
        """Triton-style cumulative statistics per loaded version."""
        return self._plane.statistics(model)

    def close(self) -> None:
        """Drain and unload every model; remove the private scratch directory."""
        if self._closed:
            return
        self._closed = True
        try:
            self._plane.close()
        finally:
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> EmbeddedRuntime:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _refused(what: str, exc: PackagerError | OSError) -> EmbeddedOpenError:
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return EmbeddedOpenError(f"{what}: {detail}")


def open_bundle(path: str | Path, *, trusted_keys: KeyPaths = (),
                allow_unsigned: bool = False, overrides: ModelOverrides | None = None,
                max_concurrent_executions: int = 0) -> EmbeddedRuntime:
    """Serve the one model of a bundle: an ``.edgepkg`` file (verified, then extracted to a
    private temporary directory) or a directory a bundle was extracted to (verified where it
    is). ``overrides`` are the ``[models.NAME]`` settings of agent.toml (batching, instances,
    isolation, priority, ...). Raises EmbeddedOpenError when the bundle is refused or fails
    to load."""
    from packager.bundle.reader import open_bundle as read_bundle
    from packager.bundle.reader import verify_extracted

    source = Path(path)
    keys = [Path(k) for k in trusted_keys]
    scratch = Path(tempfile.mkdtemp(prefix="edge-embedded-"))
    try:
        if source.is_dir():
            manifest = verify_extracted(source, keys, allow_unsigned)
            model_dir = source
        else:
            with read_bundle(source) as reader:
                reader.verify(keys, allow_unsigned)
                manifest = reader.manifest
                model_dir = reader.extract(
                    scratch / "models" / manifest.name / str(manifest.version))
    except (PackagerError, OSError) as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise _refused(f"bundle {source} refused", exc) from exc
    plane = DataPlane(scratch, autoload=False, max_concurrent_executions=max_concurrent_executions,
                      overrides={manifest.name: overrides} if overrides is not None else None,
                      server_name="edge-agent-embedded")
    runtime = EmbeddedRuntime(plane, scratch)
    try:
        plane.repository.load_version(manifest.name, manifest.version, model_dir=model_dir)
        plane.load_all(only=lambda _name, _version: False)  # nothing more: marks it ready
    except (AgentError, PackagerError, OSError) as exc:
        runtime.close()
        raise EmbeddedOpenError(f"bundle {source}: model {manifest.name!r} version "
                                f"{manifest.version} failed to load: {exc}") from exc
    return runtime


def open_state_dir(state_dir: str | Path, *, config: str | Path | None = None,
                   trusted_keys: KeyPaths = (), allow_unsigned: bool = False,
                   overrides: Mapping[str, ModelOverrides] | None = None,
                   max_concurrent_executions: int = 0, strict: bool = True) -> EmbeddedRuntime:
    """Serve the active version of every model in an agent's state directory, read-only (the
    agent may be running: nothing there is written or locked).

    ``config``: the agent's agent.toml, whose trusted keys, ``allow_unsigned``,
    ``[models.*]`` settings and ``[agent] max_concurrent_executions`` then apply (the
    keyword arguments add keys and replace the rest). Every active version's signature and
    file hashes are checked before it loads. ``strict`` (the default) raises
    EmbeddedOpenError when any active version is refused or fails to load; otherwise such
    models are left out and logged."""
    from edge_agent.config import load_config
    from edge_agent.state.store import read_active_versions
    from packager.bundle.reader import verify_extracted

    root = Path(state_dir)
    keys = [Path(k) for k in trusted_keys]
    settings: Mapping[str, ModelOverrides] = overrides or {}
    defaults: ModelOverrides | None = None
    if config is not None:
        cfg = load_config(Path(config), state_dir=root)
        keys = [*cfg.deploy.trusted_keys, *keys]
        allow_unsigned = allow_unsigned or cfg.deploy.allow_unsigned
        settings = {**cfg.models.overrides, **settings}
        defaults = cfg.models.defaults
        max_concurrent_executions = (max_concurrent_executions
                                     or cfg.models.max_concurrent_executions)
    try:
        active = {name: v for name, v in read_active_versions(root).items() if v is not None}
    except AgentError as exc:
        raise EmbeddedOpenError(str(exc)) from exc
    problems: list[str] = []
    verified: dict[str, int] = {}
    for name, version in sorted(active.items()):
        try:
            verify_extracted(root / "models" / name / str(version), keys, allow_unsigned)
            verified[name] = version
        except (PackagerError, OSError) as exc:
            problems.append(str(_refused(f"model {name!r} version {version} refused", exc)))
    if problems and strict:
        raise EmbeddedOpenError("; ".join(problems))
    plane = DataPlane(root, autoload=False, overrides=settings, default_overrides=defaults,
                      max_concurrent_executions=max_concurrent_executions,
                      server_name="edge-agent-embedded")
    runtime = EmbeddedRuntime(plane)
    try:
        loaded = plane.load_all(only=lambda name, version: verified.get(name) == version)
    except BaseException:
        runtime.close()
        raise
    for mv in loaded:
        if mv.state is not ServingState.READY:
            problems.append(f"model {mv.name!r} version {mv.version} failed to load: "
                            f"{mv.reason}")
    if problems and strict:
        with contextlib.suppress(AgentError):
            runtime.close()
        raise EmbeddedOpenError("; ".join(problems))
    for problem in problems:
        log.warning("embedded: %s", problem)
    return runtime
