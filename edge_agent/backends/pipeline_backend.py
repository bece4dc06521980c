"""Pipelines (ensembles): steps that name other models on the agent, tensors wired by name.

Each step is one request to the agent hosting the pipeline (the :class:`Host` given at load),
so every step model
keeps its own batcher, statistics, versions and isolation; a step pinned to a version calls that
version, an unpinned one the model's active version at each request (a member rolled back is
followed). Loading checks the wiring against the members as they are served now: each must be
loaded, have the tensors the wiring names with the datatypes and shapes it implies, batch at
least as far as the pipeline, and no pipeline may reach itself through its members.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backends.base import BackendOptions, BackendPlugin, Cancellation, Host
from edge_agent.errors import AgentError, BackendError, ModelNotFoundError, ModelUnavailableError
from packager.bundle.backend_options import PipelineOptions
from packager.bundle.errors import PackagerError
from packager.bundle.manifest import Manifest
from packager.bundle.pipeline import Step, check_wiring, step_label

NAME = "pipeline"


def _steps(manifest: Manifest) -> tuple[Step, ...]:
    raw = PipelineOptions.of(manifest).steps
    if not raw:
        raise BackendError(f"pipeline {manifest.name!r}: its manifest lists no steps "
                           "(backend_options.pipeline.steps)")
    try:
        return tuple(Step.from_dict(s) for s in raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BackendError(f"pipeline {manifest.name!r}: malformed step: {exc}") from exc


def _restated(exc: AgentError, message: str) -> AgentError:
    """``exc``'s class (so that its status code stays) with ``message``."""
    try:
        return type(exc)(message)
    except Exception:  # a subclass with another constructor
        return BackendError(message)


class PipelineBackend:
    """One loaded pipeline version: runs its steps in order through its host."""

    name = NAME
    cancellation = Cancellation.NONE
    device = "pipeline"

    def __init__(self, model_dir: Path, manifest: Manifest, options: BackendOptions) -> None:
        self._label = f"pipeline {manifest.name!r} version {manifest.version}"
        if options.host is None:
            raise BackendError(f"{self._label}: no agent hosts it (its steps are other models "
                               "on the agent); pipelines run only inside an agent")
        self._host: Host = options.host
        self._name = manifest.name
        self._steps = _steps(manifest)
        self._batched = manifest.batching.max_batch_size > 0
        self.inputs = manifest.inputs
        self.outputs = manifest.outputs
        self._check(manifest)

    # ------------------------------------------------------------------ deploy-time checks
    def _check(self, manifest: Manifest) -> None:
        def member(i: int, step: Step) -> Manifest:
            try:
                info = self._host.model_config(step.model, step.version)
            except (ModelNotFoundError, ModelUnavailableError) as exc:
                raise BackendError(f"{step_label(self._label, i, step)} is not served on this "
                                   f"agent ({exc}); deploy it before the pipeline") from None
            if info.decoupled:
                raise BackendError(f"{step_label(self._label, i, step)} is decoupled (it "
                                   "streams many responses); a pipeline step must answer once")
            self._check_cycle(info.manifest, [manifest.name])
            return info.manifest

        try:
            check_wiring(self._label, manifest, self._steps, member)
        except PackagerError as exc:
            raise BackendError(str(exc)) from None

    def _check_cycle(self, member: Manifest, path: list[str]) -> None:
        if member.backend != NAME:
            return
        if member.name in path:
            raise BackendError(f"{self._label}: the pipelines form a cycle: "
                               f"{' -> '.join([*path, member.name])}")
        for step in _steps(member):
            try:
                sub = self._host.model_config(step.model, step.version).manifest
            except AgentError:
                continue
            self._check_cycle(sub, [*path, member.name])

    # ------------------------------------------------------------------ executions
    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        """Run the steps in order, each through its model's batcher."""
        tensors: dict[str, Any] = dict(inputs)
        for i, step in enumerate(self._steps, 1):
            try:
                result = self._host.infer(step.model,
                                          {k: tensors[v] for k, v in step.inputs.items()},
                                          step.version, list(step.outputs))
            except AgentError as exc:
                raise _restated(exc, f"{self._label}: step {i} (model {step.model!r}) "
                                     f"failed: {exc}") from exc
            for k, v in step.outputs.items():
                tensors[v] = result[k]
        return {t.name: tensors[t.name] for t in self.outputs}

    def cancel(self, instance: int, execution: int) -> bool:
        """A pipeline does not stop its steps (each step's own timeout does)."""
        return False

    def close(self) -> None:
        """Nothing to release: the steps belong to their own models."""


def pinned_by(manifests: list[Manifest], model: str, version: int) -> list[str]:
    """The pipelines among ``manifests`` ("name version N") with a step pinned to ``model``
    version ``version``: that version must stay while they are served."""
    users = []
    for m in manifests:
        if m.backend != NAME:
            continue
        try:
            steps = _steps(m)
        except BackendError:
            continue
        if any(s.model == model and s.version == version for s in steps):
            users.append(f"{m.name} version {m.version}")
    return users


def load(model_dir: Path, manifest: Manifest, options: BackendOptions) -> PipelineBackend:
    """Load a pipeline version: check its wiring against the models the agent serves."""
    return PipelineBackend(model_dir, manifest, options)


PLUGIN = BackendPlugin(load=load, runtime_modules=("numpy",), cancellation=Cancellation.NONE)
"""The entry point ``edge_agent.backends: pipeline``."""
