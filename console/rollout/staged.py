"""Staged rollout over the management client: refuse what does not fit, or what the agent would
refuse (asked with CheckDeploy), before any upload; deploy to one canary, keep it under watch
for a soak time, then deploy to the rest; when the canary fails or turns unhealthy, stop and
roll the canary back.

Bundle selection is the scripting subcommands' own (:func:`console.commands.read_bundles`,
:func:`console.commands.pick_bundle`); uploads go through ``AgentClient.deploy``. Nothing here
touches the UI: progress goes to the ``report`` callback (from worker threads).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

from console.commands import LocalBundle, pick_bundle, verify_bundle_files
from console.connections import Connections
from console.errors import BundleRejectedError, ConsoleError
from console.fleet import FleetAgent
from edge_agent.client.agent_client import AgentClient
from edge_agent.client.types import DeployCheck, StepInfo

HEALTH_POLL_S = 0.5
MAX_ERROR_RATE = 0.2  # the canary is unhealthy above this share of failed requests...
MIN_REQUESTS = 10  # ...once it has served at least this many in the soak window
PARALLEL_UPLOADS = 4
CANCELLED = "rollout cancelled by the operator"


class Phase(StrEnum):
    """Where one target is in the rollout."""

    WAITING = "waiting"
    REFUSED = "refused"  # no bundle fits this agent: never uploaded
    DEPLOYING = "deploying"
    SOAKING = "soaking"  # the canary, under watch
    DONE = "done"
    FAILED = "failed"
    ROLLED_BACK = "rolled back"
    SKIPPED = "skipped"  # the canary failed, so this agent was left alone


@dataclass(frozen=True)
class TargetProgress:
    """One target's progress (a fresh copy is reported at every change)."""

    key: str
    name: str
    canary: bool = False
    phase: Phase = Phase.WAITING
    bundles: tuple[str, ...] = ()
    sent: int = 0
    total: int = 0
    steps: tuple[StepInfo, ...] = ()
    message: str = ""


@dataclass
class RolloutOutcome:
    """How the rollout ended."""

    ok: bool
    message: str
    targets: dict[str, TargetProgress] = field(default_factory=dict)


def group_bundles(bundles: Sequence[LocalBundle]) -> list[list[LocalBundle]]:
    """Bundles grouped by (model, version): each group holds the builds for several profiles."""
    groups: dict[tuple[str, int], list[LocalBundle]] = {}
    for b in bundles:
        groups.setdefault((b.manifest.name, b.manifest.version), []).append(b)
    return list(groups.values())


class Rollout:
    """One staged rollout. :meth:`run` blocks (call it from a worker thread)."""

    def __init__(self, connections: Connections, bundles: Sequence[LocalBundle],
                 targets: Sequence[FleetAgent], *, canary: str | None, soak_s: float,
                 report: Callable[[TargetProgress], None],
                 cancelled: Callable[[], bool] = lambda: False) -> None:
        self.connections = connections
        self.groups = group_bundles(bundles)
        self.targets = list(targets)
        self.canary_key = canary
        self.soak_s = soak_s
        self._report = report
        self.cancelled = cancelled
        self.progress = {t.key: TargetProgress(t.key, t.name) for t in self.targets}
        self._chosen: dict[str, list[LocalBundle]] = {}
        # (agent key, model) -> the version active before this rollout deployed it: a roll
        # back names it, so it can never race the agent's own automatic rollback into a toggle
        self._before: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def _update(self, key: str, **changes: Any) -> None:
        with self._lock:
            self.progress[key] = replace(self.progress[key], **changes)
            current = self.progress[key]
        self._report(current)

    def _client(self, agent: FleetAgent) -> AgentClient:
        return self.connections.client(agent)

    # -- stages --------------------------------------------------------------------------------
    def check_fit(self) -> list[FleetAgent]:
        """Pick each target's bundles (its profile/arch/runtimes, as the agent would); targets
        nothing fits are marked REFUSED with the reason, before any upload."""
        fitting = []
        for agent in self.targets:
            try:
                info = self.connections.call(agent, lambda c: c.info())
                chosen = [pick_bundle(group, info) for group in self.groups]
                refused = self.refusal(agent, chosen)
            except (BundleRejectedError, ConsoleError) as exc:
                self._update(agent.key, phase=Phase.REFUSED, message=str(exc))
                continue
            if refused:
                self._update(agent.key, phase=Phase.REFUSED, message=refused)
                continue
            self._chosen[agent.key] = chosen
            self._update(agent.key, bundles=tuple(b.path.name for b in chosen),
                         total=sum(b.path.stat().st_size for b in chosen))
            fitting.append(agent)
        return fitting

    def refusal(self, agent: FleetAgent, chosen: Sequence[LocalBundle]) -> str:
        """Why ``agent`` would refuse one of ``chosen`` (asked before any upload; "" when it
        would take them all, or predates CheckDeploy)."""
        for bundle in chosen:
            check = self.connections.call(agent, partial(_check_deploy, path=bundle.path))
            if check is not None and not check.ok:
                return f"refused before the upload: {check.message}"
        return ""

    def deploy_to(self, agent: FleetAgent) -> bool:
        """Upload and deploy the chosen bundles to ``agent``; True when every one committed."""
        self._update(agent.key, phase=Phase.DEPLOYING)
        base = 0
        steps: list[StepInfo] = []
        for bundle in self._chosen[agent.key]:
            def on_progress(sent: int, _total: int, base: int = base) -> None:
                self._update(agent.key, sent=base + sent)

            def on_step(step: StepInfo) -> None:
                # a streamed step carries no time: stamped when it reached the console
                steps.append(step if step.at else replace(step, at=time.time()))
                self._update(agent.key, steps=tuple(steps), message=f"{step.step}: "
                             f"{step.message}")

            try:
                self.remember_active(agent, bundle.manifest.name)
                result = self.connections.call(agent, partial(
                    AgentClient.deploy, bundle=bundle.path, on_progress=on_progress,
                    on_step=on_step))
            except ConsoleError as exc:
                self._update(agent.key, phase=Phase.FAILED, message=str(exc))
                return False
            base += bundle.path.stat().st_size
            if not result.ok:
                self._update(agent.key, phase=Phase.FAILED, message=result.message)
                return False
            self._update(agent.key, sent=base, message=result.message)
        return True

    def deployed(self, agent: FleetAgent) -> list[tuple[str, int]]:
        """``(model, version)`` of what this rollout deploys to ``agent``."""
        return [(b.manifest.name, b.manifest.version) for b in self._chosen[agent.key]]

    def remember_active(self, agent: FleetAgent, name: str) -> None:
        """Note the version of ``name`` active on ``agent`` now (a roll back returns to it)."""
        current = self.connections.call(agent, partial(AgentClient.models, model=name))
        active = next((v.version for v in current if v.active), None)
        if active is not None:
            self._before[(agent.key, name)] = active

    def health_problem(self, agent: FleetAgent, since: float) -> str | None:
        """Why the canary is not healthy now, or None: every deployed version must be active
        and ready, and its error rate since ``since`` below :data:`MAX_ERROR_RATE`."""
        try:
            versions = self.connections.call(agent, lambda c: c.models())
            for name, version in self.deployed(agent):
                mine = [v for v in versions if v.model == name and v.version == version]
                if not mine or not mine[0].active:
                    return f"{name} v{version} is no longer active (the agent switched back)"
                if mine[0].state.upper() != "READY":
                    return f"{name} v{version} is {mine[0].state}"
                points = self.connections.call(agent, partial(
                    AgentClient.query_metrics, model=name, start=since, end=time.time() + 1,
                    step_s=1))
                requests = sum(p.requests for p in points)
                errors = sum(p.errors for p in points)
                if requests >= MIN_REQUESTS and errors / requests > MAX_ERROR_RATE:
                    return (f"{name} v{version} failed {errors} of {requests} requests "
                            f"({errors / requests:.0%}) during the soak")
        except ConsoleError as exc:
            return str(exc)
        return None

    def soak(self, agent: FleetAgent) -> str | None:
        """Watch the canary for the soak time; the first problem seen, or None."""
        since = time.time()
        end = time.monotonic() + self.soak_s
        while True:
            remaining = end - time.monotonic()
            self._update(agent.key, phase=Phase.SOAKING,
                         message=f"healthy; watching {max(0.0, remaining):.0f}s more")
            problem = self.health_problem(agent, since)
            if problem is not None or remaining <= 0:
                return problem
            if self.cancelled():
                return CANCELLED
            time.sleep(min(HEALTH_POLL_S, max(0.0, remaining)))

    def roll_back(self, agent: FleetAgent, why: str) -> None:
        """Put the canary back on the versions it ran before."""
        notes = []
        for name, version in self.deployed(agent):
            try:
                versions = self.connections.call(agent, partial(AgentClient.models, model=name))
                if not any(v.version == version and v.active for v in versions):
                    notes.append(f"{name} already off v{version}")
                    continue
                result = self.connections.call(agent, partial(
                    AgentClient.rollback, model=name,
                    to_version=self._before.get((agent.key, name))))
                notes.append(result.message)
            except ConsoleError as exc:
                notes.append(f"rollback of {name} failed: {exc}")
        self._update(agent.key, phase=Phase.ROLLED_BACK,
                     message=f"{why}; " + "; ".join(notes))

    # -- the whole thing -----------------------------------------------------------------------
    def run(self) -> RolloutOutcome:
        """Check the bundles' files, fit, canary, soak, the rest. Never raises for an agent's
        failure."""
        try:  # every file hashed locally first: a corrupt bundle never reaches any agent
            verify_bundle_files([b for group in self.groups for b in group])
        except BundleRejectedError as exc:
            self._skip(self.targets, "nothing sent: a bundle failed its local check")
            return self._outcome(False, str(exc))
        fitting = self.check_fit()
        if not fitting:
            return self._outcome(False, "no target can take these bundles (see each reason)")
        canary = next((a for a in fitting if a.key == self.canary_key), fitting[0])
        self._update(canary.key, canary=True)
        rest = [a for a in fitting if a.key != canary.key]
        if not self.deploy_to(canary):
            self._skip(rest, "canary failed")
            return self._outcome(False, f"canary {canary.name} failed: "
                                 f"{self.progress[canary.key].message}; nothing else touched")
        if rest or self.soak_s > 0:
            problem = self.soak(canary)
            if problem is not None:
                self.roll_back(canary, problem)
                if problem == CANCELLED:
                    self._skip(rest, "rollout cancelled")
                    return self._outcome(False, f"cancelled while {canary.name} was under "
                                         "watch; rolled it back, nothing else touched")
                self._skip(rest, "canary turned unhealthy")
                return self._outcome(False, f"canary {canary.name} turned unhealthy "
                                     f"({problem}); rolled it back, nothing else touched")
        self._update(canary.key, phase=Phase.DONE, message="committed and stayed healthy")
        if self.cancelled():
            self._skip(rest, "rollout cancelled")
            return self._outcome(False, "cancelled after the canary")
        with ThreadPoolExecutor(PARALLEL_UPLOADS, thread_name_prefix="rollout") as pool:
            results = list(pool.map(self._deploy_rest, rest))
        failed = [a.name for a, ok in zip(rest, results, strict=True) if ok is False]
        if self.cancelled():
            done = sum(ok is True for ok in results) + 1
            return self._outcome(False, f"cancelled: done on {done} agent(s), the rest left "
                                 "alone")
        refused = [p.name for p in self.progress.values() if p.phase is Phase.REFUSED]
        if failed or refused:
            return self._outcome(False, f"done on {len(fitting) - len(failed)} agent(s); "
                                 f"failed on {', '.join(failed) or 'none'}; refused on "
                                 f"{', '.join(refused) or 'none'}")
        return self._outcome(True, f"done on all {len(fitting)} agent(s)")

    def _deploy_rest(self, agent: FleetAgent) -> bool | None:
        if self.cancelled():
            self._update(agent.key, phase=Phase.SKIPPED, message="rollout cancelled")
            return None
        ok = self.deploy_to(agent)
        if ok:
            self._update(agent.key, phase=Phase.DONE)
        return ok

    def _skip(self, agents: Sequence[FleetAgent], why: str) -> None:
        for a in agents:
            self._update(a.key, phase=Phase.SKIPPED, message=why)

    def _outcome(self, ok: bool, message: str) -> RolloutOutcome:
        with self._lock:
            return RolloutOutcome(ok, message, dict(self.progress))


def _check_deploy(client: AgentClient, path: Path) -> DeployCheck | None:
    return client.check_deploy(path)
