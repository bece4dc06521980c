"""The console session's rollouts, running and recent, owned by the app (not by a screen): a
rollout keeps running while the operator browses other agents or closes the deploy view.

Worker threads report through :meth:`Rollouts.progress` and :meth:`Rollouts.finished`, which
the app calls on its own thread; screens subscribe to hear of any change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from console.rollout.staged import Phase, RolloutOutcome, TargetProgress

KEEP_RECENT = 20  # finished rollouts kept for the rollouts view
ENDED_PHASES = frozenset({Phase.REFUSED, Phase.DONE, Phase.FAILED, Phase.ROLLED_BACK,
                          Phase.SKIPPED})


@dataclass
class RolloutJob:
    """One rollout of this session: what it deploys, each target's progress, how it ended."""

    id: int
    title: str  # e.g. "mlp v2 to 3 agent(s)"
    started_at: float
    canary: str  # the canary's fleet key
    targets: dict[str, TargetProgress]
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    outcome: RolloutOutcome | None = None
    ended_at: float | None = None

    @property
    def running(self) -> bool:
        """True until the rollout has ended (cancelled ones included)."""
        return self.outcome is None

    def ended_targets(self) -> int:
        """How many targets are past their last step."""
        return sum(p.phase in ENDED_PHASES for p in self.targets.values())

    def status(self) -> str:
        """``running 1/3``, ``cancelling 1/3``, ``done`` or ``failed: why``."""
        if self.outcome is None:
            verb = "cancelling" if self.cancel_requested.is_set() else "running"
            return f"{verb} {self.ended_targets()}/{len(self.targets)}"
        return "done" if self.outcome.ok else f"failed: {self.outcome.message}"


class Rollouts:
    """Running and recent rollouts, newest first (touched only on the app's thread)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.jobs: list[RolloutJob] = []
        self._next_id = 1
        self._listeners: list[Callable[[], object]] = []

    def subscribe(self, listener: Callable[[], object]) -> Callable[[], None]:
        """Call ``listener()`` after every change; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    def add(self, title: str, targets: Sequence[TargetProgress], canary: str) -> RolloutJob:
        """Record a rollout about to start (every target waiting)."""
        job = RolloutJob(self._next_id, title, self.clock(), canary,
                         {t.key: t for t in targets})
        self._next_id += 1
        self.jobs.insert(0, job)
        finished = [j for j in self.jobs if not j.running]
        for old in finished[KEEP_RECENT:]:
            self.jobs.remove(old)
        self._changed()
        return job

    def get(self, job_id: int) -> RolloutJob | None:
        """The rollout with this id, if still listed."""
        return next((j for j in self.jobs if j.id == job_id), None)

    def running(self) -> list[RolloutJob]:
        """Rollouts not ended yet, newest first."""
        return [j for j in self.jobs if j.running]

    def progress(self, job_id: int, progress: TargetProgress) -> None:
        """A target of rollout ``job_id`` moved on."""
        job = self.get(job_id)
        if job is not None:
            job.targets[progress.key] = progress
            self._changed()

    def finished(self, job_id: int, outcome: RolloutOutcome) -> None:
        """Rollout ``job_id`` ended."""
        job = self.get(job_id)
        if job is not None:
            job.targets.update(outcome.targets)
            job.outcome = outcome
            job.ended_at = self.clock()
            self._changed()

    def cancel(self, job_id: int) -> bool:
        """Ask rollout ``job_id`` to stop (a canary under watch is rolled back); False when it
        is not running."""
        job = self.get(job_id)
        if job is None or not job.running:
            return False
        job.cancel_requested.set()
        self._changed()
        return True

    def header_text(self) -> str:
        """The rollouts' progress for the header ('' when none runs)."""
        running = self.running()
        if not running:
            return ""
        first = running[0]
        more = f" (+{len(running) - 1} more)" if len(running) > 1 else ""
        return f"rollout #{first.id} {first.status()}{more}"
