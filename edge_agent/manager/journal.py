"""The durable record of each deployment: begin, each step reached, commit or failure.

Every step is written to the state store before anyone hears of it: first the store, then the
caller's event sink, then the step hooks given to the constructor (e.g. a crash test's pause).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

from edge_agent.core.repository import ModelVersion
from edge_agent.core.repository import VersionState as Serving
from edge_agent.errors import StateStoreError
from edge_agent.manager.errors import DeploymentBusyError
from edge_agent.manager.outcome import DeployOutcome, StepEvent
from edge_agent.state import Deployment, DeploymentKind, StateStore, Step, VersionState

log = logging.getLogger(__name__)

EventSink = Callable[[StepEvent], None]
"""Receives each step of one deployment as it is reached (the caller's progress display)."""

StepHook = Callable[[int, Step], None]
"""Called with (deployment id, step) right after the step is recorded durably."""


class DeploymentJournal:
    """Writes deployments and their steps to the state store and tells the listeners."""

    def __init__(self, store: StateStore, *, step_hooks: Sequence[StepHook] = ()) -> None:
        self.store = store
        self._hooks = tuple(step_hooks)

    def begin(self, model: str, kind: DeploymentKind, to_version: int | None,
              from_version: int | None) -> int:
        """Record the start of a deployment (the caller holds the model's lock)."""
        try:
            return self.store.begin_deployment(model, kind, to_version=to_version,
                                               from_version=from_version)
        except StateStoreError as exc:
            raise DeploymentBusyError(str(exc)) from None

    def reached(self, dep: int, step: Step, message: str, on_event: EventSink | None) -> None:
        """Record that ``dep`` reached ``step``; then tell the event sink and the hooks."""
        self.store.record_step(dep, step, message)
        if on_event is not None:
            on_event(StepEvent(dep, step.value, True, message))
        for hook in self._hooks:
            hook(dep, step)

    def commit(self, dep: int, message: str, on_event: EventSink | None) -> Deployment:
        """Finish ``dep`` successfully (its target becomes the active version)."""
        done = self.store.commit_deployment(dep, message)
        if on_event is not None:
            on_event(StepEvent(dep, Step.COMMITTED.value, True, message))
        return done

    def fail(self, dep: int, step: Step, exc: BaseException, on_event: EventSink | None,
             name: str | None = None, version: int | None = None) -> DeployOutcome:
        """Finish ``dep`` as failed at ``step``; ``version`` (when given) is marked failed."""
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

    def record_load(self, mv: ModelVersion, load_ms: float | None,
                    rss_delta: int | None) -> None:
        """Store a loaded version's state and load figures (best effort: never fails a load)."""
        state = VersionState.READY if mv.state is Serving.READY else VersionState.FAILED
        with contextlib.suppress(StateStoreError):
            self.store.set_version_state(mv.name, mv.version, state, load_ms=load_ms,
                                         rss_delta_bytes=rss_delta,
                                         load_error=None if state is VersionState.READY
                                         else mv.reason)
