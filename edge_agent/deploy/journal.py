"""The durable record of each deployment: begin, each step reached, commit or failure.

Every step is written to the state store before anyone hears of it: first the store, then the
caller's event sink, then the step hooks given to the constructor (e.g. a crash test's pause).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from edge_agent.core.repository import ServingState, VersionSlot
from edge_agent.deploy import caller
from edge_agent.deploy.errors import (
    DeploymentBusyError,
    DiskFullError,
    StateDirReadOnlyError,
    storage_error,
)
from edge_agent.deploy.outcome import DeployOutcome, StepEvent
from edge_agent.errors import AgentError, StateStoreError
from edge_agent.state import Deployment, DeploymentKind, StateStore, Step, VersionState

log = logging.getLogger(__name__)

EventSink = Callable[[StepEvent], None]
"""Receives each step of one deployment as it is reached (the caller's progress display)."""

StepHook = Callable[[int, Step], None]
"""Called with (deployment id, step) right after the step is recorded durably."""


class RecordingFailed(Exception):
    """A deployment's step could not be written to the state store (disk full, read-only):
    the deployment ends here. Deliberately not an AgentError, so that no step handler takes it
    for the failure of a step; :meth:`DeploymentJournal.abandon` ends the deployment."""

    def __init__(self, step: Step, error: AgentError) -> None:
        super().__init__(str(error))
        self.step = step
        self.error = error


class DeploymentJournal:
    """Writes deployments and their steps to the state store and tells the listeners.

    When the store cannot be written, the deployment is ended as failed as soon as it can be:
    at once if the store takes that write, else at the model's next change (before it begins),
    so a full disk never leaves a model refused as "already in progress".
    """

    def __init__(self, store: StateStore, *, step_hooks: Sequence[StepHook] = ()) -> None:
        self.store = store
        self._hooks = tuple(step_hooks)
        self._unfinished: dict[str, tuple[int, str, Step]] = {}
        self._guard = threading.Lock()
        self._labels: dict[int, str] = {}  # deployment id -> "mlp v2" while it runs (for logs)

    def begin(self, model: str, kind: DeploymentKind, to_version: int | None,
              from_version: int | None) -> int:
        """Record the start of a deployment (the caller holds the model's lock)."""
        self._finish_unfinished(model)
        try:
            dep = self.store.begin_deployment(model, kind, to_version=to_version,
                                              from_version=from_version)
        except StateStoreError as exc:
            if _write_failure(exc):
                raise self.clean(exc, f"record a {kind} of {model}") from None
            raise DeploymentBusyError(str(exc)) from None
        versions = (f"v{from_version} -> v{to_version}" if from_version and to_version
                    and from_version != to_version
                    else f"v{to_version or from_version}" if to_version or from_version else "")
        with self._guard:
            self._labels[dep] = f"{model} {versions}".strip()
        log.info("deployment %d: %s of %s by %s", dep, kind.value,
                 f"{model} {versions}".strip(), caller.current())
        return dep

    def _label(self, dep: int, *, done: bool = False) -> str:
        with self._guard:
            label = self._labels.pop(dep, "") if done else self._labels.get(dep, "")
        return f"deployment {dep} ({label})" if label else f"deployment {dep}"

    def reached(self, dep: int, step: Step, message: str, on_event: EventSink | None) -> None:
        """Record that ``dep`` reached ``step``; then tell the event sink and the hooks."""
        try:
            self.store.record_step(dep, step, message)
            if step is Step.PARITY:
                self.store.record_parity(dep, True, message)
        except StateStoreError as exc:
            raise RecordingFailed(step, self.clean(exc, f"record step {step.value}")) from exc
        log.info("%s: %s%s", self._label(dep), step.value, f": {message}" if message else "")
        if on_event is not None:
            on_event(StepEvent(dep, step.value, True, message))
        for hook in self._hooks:
            hook(dep, step)

    def commit(self, dep: int, message: str, on_event: EventSink | None) -> Deployment:
        """Finish ``dep`` successfully (its target becomes the active version)."""
        try:
            done = self.store.commit_deployment(dep, message)
        except StateStoreError as exc:
            raise RecordingFailed(Step.COMMITTED,
                                  self.clean(exc, "commit the deployment")) from exc
        log.info("%s: committed%s", self._label(dep, done=True),
                 f": {message}" if message else "")
        if on_event is not None:
            on_event(StepEvent(dep, Step.COMMITTED.value, True, message))
        return done

    def fail(self, dep: int, step: Step, exc: BaseException, on_event: EventSink | None,
             name: str | None = None, version: int | None = None) -> DeployOutcome:
        """Finish ``dep`` as failed at ``step``; ``version`` (when given) is marked failed."""
        if not isinstance(exc, (DiskFullError, StateDirReadOnlyError)):
            exc = storage_error(exc, f"complete step {step.value}", self.where) or exc
        text = str(exc)
        reason = f"{step.value} failed: {text}"
        if name is not None and version is not None:
            with contextlib.suppress(StateStoreError):
                self.store.set_version_state(name, version, VersionState.FAILED,
                                             load_error=text)
        if step is Step.PARITY:
            with contextlib.suppress(StateStoreError):
                self.store.record_parity(dep, False, text)
        try:
            done = self.store.fail_deployment(dep, reason, failed_step=step)
        except StateStoreError as err:
            clean = exc if isinstance(exc, AgentError) else self.clean(err, "record a failure")
            raise RecordingFailed(step, clean) from err
        if on_event is not None:
            on_event(StepEvent(dep, step.value, False, text))
        log.warning("%s failed: %s", self._label(dep, done=True), reason)
        return DeployOutcome(done, False, reason, self.store.active_version(done.model))

    def abandon(self, dep: int, model: str, failure: RecordingFailed,
                on_event: EventSink | None) -> DeployOutcome:
        """End ``dep`` after a step could not be recorded: failed now if the store takes it,
        else remembered and failed before the model's next change (and the error raised)."""
        reason = f"{failure.step.value} failed: {failure.error}"
        log.warning("%s: %s", self._label(dep, done=True), reason)
        if on_event is not None:
            on_event(StepEvent(dep, failure.step.value, False, str(failure.error)))
        try:
            done = self.store.fail_deployment(dep, reason, failed_step=failure.step)
        except StateStoreError:
            with self._guard:
                self._unfinished[model] = (dep, reason, failure.step)
            raise failure.error from None
        return DeployOutcome(done, False, reason, self.store.active_version(model))

    def clean(self, exc: StateStoreError, what: str) -> AgentError:
        """The error to answer for a store write that failed: the one disk-full or read-only
        message when that is the cause, else the store's own error."""
        return storage_error(exc, what, self.where) or exc

    @property
    def where(self) -> Path:
        """The state directory (named in storage messages)."""
        return self.store.path.parent

    def _finish_unfinished(self, model: str) -> None:
        with self._guard:
            pending = self._unfinished.get(model)
        if pending is None:
            return
        dep, reason, step = pending
        try:
            self.store.fail_deployment(dep, reason, failed_step=step)
        except StateStoreError as exc:
            if _write_failure(exc):
                raise self.clean(exc, f"finish deployment {dep} of {model}") from None
            # it is no longer in progress: nothing to finish
        with self._guard:
            self._unfinished.pop(model, None)

    def record_load(self, mv: VersionSlot, load_ms: float | None,
                    rss_delta: int | None) -> None:
        """Store a loaded version's state and load figures (best effort: never fails a load)."""
        state = VersionState.READY if mv.state is ServingState.READY else VersionState.FAILED
        with contextlib.suppress(StateStoreError):
            self.store.set_version_state(mv.name, mv.version, state, load_ms=load_ms,
                                         rss_delta_bytes=rss_delta,
                                         load_error=None if state is VersionState.READY
                                         else mv.reason)


def _write_failure(exc: StateStoreError) -> bool:
    """True when the store could not write (its error wraps a database or OS error), as
    opposed to refusing a change (busy model, unknown version)."""
    return isinstance(exc.__cause__, (sqlite3.Error, OSError))
