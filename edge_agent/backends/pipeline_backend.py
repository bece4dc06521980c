"""Pipelines (ensembles): steps that name other models on the agent, tensors wired by name.

Each step is one request to the agent hosting the pipeline (the :class:`Host` given at load),
so every step model
keeps its own batcher, statistics, versions and isolation; a step pinned to a version calls that
version, an unpinned one the model's active version at each request (a member rolled back is
followed). The steps form a DAG: every step whose inputs are ready starts at once (on its
model's batcher threads, bounded by the execution gate, whose slot the pipeline gives up while
it waits), so independent branches run side by side. A step with a condition (``when``) that
does not hold is skipped; so is every step that reads what a skipped step would have written,
and the pipeline outputs they would have written are absent from the answer.

Loading checks the wiring against the members as they are served now: each must be
loaded, have the tensors the wiring names with the datatypes and shapes it implies, batch at
least as far as the pipeline, and no pipeline may reach itself through its members.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backends.base import BackendOptions, BackendPlugin, Cancellation, Host
from edge_agent.errors import AgentError, BackendError, ModelNotFoundError, ModelUnavailableError
from packager.bundle.backend_options import PipelineOptions
from packager.bundle.errors import PackagerError
from packager.bundle.manifest import Manifest
from packager.bundle.pipeline import (
    Step,
    StepCondition,
    check_wiring,
    dependencies,
    producers,
    step_label,
    step_order,
)

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


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
    "<": operator.lt, "<=": operator.le}


def holds(when: StepCondition, tensor: np.ndarray) -> bool:
    """Whether every element of ``tensor`` compares ``when.op`` to ``when.value`` (False for
    an empty tensor)."""
    array = np.asarray(tensor)
    return bool(array.size) and bool(np.all(_OPS[when.op](array, when.value)))


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
        self._needs = dependencies(self._steps)
        self._batched = manifest.batching.max_batch_size > 0
        self.inputs = manifest.inputs
        self.outputs = manifest.outputs
        self._check(manifest)
        self.optional_outputs = self._optional_outputs()
        """Pipeline output -> the step that writes it, for outputs a skipped step leaves out."""

    def _optional_outputs(self) -> dict[str, str]:
        """The outputs whose step has a condition or reads (at any distance) from one."""
        steps, made = self._steps, producers(self._steps)
        optional: set[int] = set()
        for i in step_order(steps):
            if steps[i].when is not None or any(made.get(t) in optional for t in steps[i].reads):
                optional.add(i)
        names = {t.name for t in self.outputs}
        return {t: f"step {i + 1} (model {steps[i].model!r})" for i in sorted(optional)
                for t in steps[i].outputs.values() if t in names}

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
        """Run the steps as their inputs become ready, each through its model's batcher;
        the outputs produced (those of skipped steps are absent)."""
        tensors: dict[str, Any] = dict(inputs)
        absent: set[str] = set()
        pending = set(range(len(self._steps)))
        finished: set[int] = set()
        running: dict[Future[dict[str, np.ndarray]], int] = {}
        try:
            while pending or running:
                ready = [i for i in sorted(pending) if self._needs[i] <= finished]
                pending.difference_update(ready)
                runnable = []
                for i in ready:
                    if self._skipped(self._steps[i], tensors, absent):
                        absent.update(self._steps[i].outputs.values())
                        finished.add(i)
                    else:
                        runnable.append(i)
                if not runnable and not running:
                    continue  # skipping made more steps ready
                if runnable and not running:  # the last one runs here, on this thread
                    for i in runnable[:-1]:
                        running[self._start(i, tensors)] = i
                    self._run_here(runnable[-1], tensors)
                    finished.add(runnable[-1])
                    continue
                for i in runnable:
                    running[self._start(i, tensors)] = i
                with self._host.waiting():
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    i = running.pop(future)
                    self._keep(i, self._answer(i, future), tensors)
                    finished.add(i)
        finally:
            for future in running:  # a step failed: the others' answers are not wanted
                future.cancel()
        return {t.name: tensors[t.name] for t in self.outputs if t.name in tensors}

    @staticmethod
    def _skipped(step: Step, tensors: dict[str, Any], absent: set[str]) -> bool:
        if any(t in absent for t in step.reads):
            return True
        return step.when is not None and not holds(step.when, tensors[step.when.tensor])

    def _failed(self, i: int, exc: AgentError) -> AgentError:
        step = self._steps[i]
        return _restated(exc, f"{self._label}: step {i + 1} (model {step.model!r}) failed: "
                              f"{exc}")

    def _start(self, i: int, tensors: dict[str, Any]) -> Future[dict[str, np.ndarray]]:
        step = self._steps[i]
        try:
            return self._host.submit(step.model,
                                     {k: tensors[v] for k, v in step.inputs.items()},
                                     step.version, list(step.outputs))
        except AgentError as exc:
            raise self._failed(i, exc) from exc

    def _run_here(self, i: int, tensors: dict[str, Any]) -> None:
        step = self._steps[i]
        try:
            result = self._host.infer(step.model,
                                      {k: tensors[v] for k, v in step.inputs.items()},
                                      step.version, list(step.outputs))
        except AgentError as exc:
            raise self._failed(i, exc) from exc
        self._keep(i, result, tensors)

    def _answer(self, i: int, future: Future[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        try:
            return future.result()
        except AgentError as exc:
            raise self._failed(i, exc) from exc

    def _keep(self, i: int, result: dict[str, np.ndarray], tensors: dict[str, Any]) -> None:
        for k, v in self._steps[i].outputs.items():
            tensors[v] = result[k]

    def cancel(self, instance: int, execution: int) -> bool:
        """A pipeline does not stop its running steps (each step's own timeout does); in an
        unbatched pipeline, the steps of a request whose caller left are not started."""
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
