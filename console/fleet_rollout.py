"""Rollouts in waves through the broker (``edge-console fleet deploy``; docs/fleet.md).

Each wave is a new signed revision of the group's desired state: the new models for agents
whose stable hash falls under the wave's percentage, the previous models for the rest. A
wave is held for the soak; when its failures (an agent that reports a failed model or goes
offline) pass ``--max-failed``, the rollout halts and publishes the previous state for
everyone (the agents already changed go back), then waits for them to report it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from console.errors import ConsoleError
from console.fleet_broker import AgentView, FleetBroker
from edge_agent.fleet import protocol as p

Say = Callable[[str], None]


@dataclass(frozen=True)
class Wave:
    """A wave: a number of agents, or a percentage of the group."""

    count: int | None = None
    percent: float | None = None

    def __str__(self) -> str:
        return f"{self.count} agent(s)" if self.count is not None else f"{self.percent:g}%"


def parse_waves(text: str) -> list[Wave]:
    """``1,5%,25%,100%``; ConsoleError naming a bad entry. The last wave must be 100%."""
    waves: list[Wave] = []
    for item in (t.strip() for t in text.split(",")):
        try:
            wave = (Wave(percent=float(item[:-1])) if item.endswith("%")
                    else Wave(count=int(item)))
        except ValueError:
            raise ConsoleError(f"--waves: {item!r} is neither a count (5) nor a percentage "
                               "(25%)") from None
        if (wave.percent is not None and not 0 < wave.percent <= 100) or (
                wave.count is not None and wave.count < 1):
            raise ConsoleError(f"--waves: {item!r} is out of range (1.. agents, 0-100%)")
        waves.append(wave)
    if not waves or waves[-1].percent != 100:
        raise ConsoleError("--waves: the last wave must be 100% (every agent)")
    return waves


@dataclass(frozen=True)
class FailureBudget:
    """``--max-failed``: a count (``2``) or a share of the wave (``2%``)."""

    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, text: str) -> FailureBudget:
        try:
            if text.endswith("%"):
                return cls(percent=float(text[:-1]))
            return cls(count=int(text))
        except ValueError:
            raise ConsoleError(f"--max-failed: {text!r} is neither a count (2) nor a "
                               "percentage (2%)") from None

    def exceeded(self, failed: int, members: int) -> bool:
        """True when ``failed`` of ``members`` is past the budget."""
        if self.count is not None:
            return failed > self.count
        return members > 0 and failed > math.floor(members * (self.percent or 0.0) / 100.0)


@dataclass
class WaveReport:
    """What one wave did."""

    wave: str
    percent: float
    revision: int
    members: list[str]
    failed: dict[str, str] = field(default_factory=dict)  # agent -> why


@dataclass
class RolloutResult:
    """How a rollout ended: ``halted`` with the restored revision, or complete."""

    waves: list[WaveReport]
    halted: bool = False
    restored_revision: int | None = None
    restored: list[str] = field(default_factory=list)
    not_restored: dict[str, str] = field(default_factory=dict)


def baseline_of(current: p.Desired | None) -> dict[str, p.ModelTarget]:
    """What the group serves for sure: the models of a complete rollout, else (a halted or
    unfinished one) its previous models."""
    if current is None:
        return {}
    return dict(current.models if current.percent >= 100 else current.previous)


def _why_failed(agent: AgentView, targets: Mapping[str, p.ModelTarget]) -> str | None:
    if not agent.online:
        return "offline"
    for model, target in targets.items():
        if agent.model_state(model, target.ref) == "failed":
            entry = ((agent.status or {}).get("models") or {}).get(model) or {}
            return f"{model}: {entry.get('error') or 'failed'}"
    return None


def _reported(agent: AgentView, revision: int, targets: Mapping[str, p.ModelTarget]) -> bool:
    return not agent.online or (agent.revision >= revision and all(
        agent.model_state(m, t.ref) != "pending" for m, t in targets.items()))


class Rollout:
    """One ``fleet deploy`` over a connected :class:`FleetBroker`."""

    def __init__(self, broker: FleetBroker, group: str, key: Ed25519PrivateKey, *,
                 say: Say = lambda _: None, converge_timeout_s: float = 300.0) -> None:
        self.broker, self.group, self.key, self.say = broker, group, key, say
        self.converge_timeout_s = converge_timeout_s

    def _next_revision(self, current: p.Desired | None) -> int:
        seen = [a.revision for a in self.broker.group_agents(self.group)]
        return max([current.revision if current else 0, *seen]) + 1

    def _members(self, percent: float) -> list[str]:
        return [a.agent_id for a in self.broker.group_agents(self.group)
                if a.online and p.in_wave(self.group, a.agent_id, percent)]

    def _views(self, ids: Sequence[str]) -> list[AgentView]:
        wanted = set(ids)
        return [a for a in self.broker.group_agents(self.group) if a.agent_id in wanted]

    def _wait_reported(self, members: Sequence[str], revision: int,
                       models: Mapping[str, p.ModelTarget]) -> None:
        self.broker.wait_until(lambda: all(_reported(a, revision, models)
                                           for a in self._views(members)),
                               self.converge_timeout_s)

    def _publish(self, desired: p.Desired) -> None:
        self.broker.publish(desired, self.key)

    def run(self, models: Mapping[str, p.ModelTarget], waves: Sequence[Wave], soak_s: float,
            budget: FailureBudget) -> RolloutResult:
        """Publish wave by wave; halt and restore when a wave fails."""
        current = self.broker.current(self.group)
        baseline = baseline_of(current)
        revision = self._next_revision(current)
        online = [a.agent_id for a in self.broker.group_agents(self.group) if a.online]
        if not online:
            raise ConsoleError(f"no agent of group {self.group} is online at the broker "
                               f"{self.broker.broker}; nothing to roll out to")
        result = RolloutResult(waves=[])
        for wave in waves:
            percent = (wave.percent if wave.percent is not None
                       else p.percent_for_count(self.group, online, wave.count or 0))
            assert percent is not None
            members = self._members(percent)
            report = WaveReport(str(wave), percent, revision, members)
            result.waves.append(report)
            self.say(f"wave {wave}: revision {revision}, {len(members)} agent(s)")
            self._publish(p.Desired(self.group, revision, dict(models), percent, baseline,
                                    issued_at=time.time(), note=f"wave {wave}"))
            self._wait_reported(members, revision, models)
            deadline = time.monotonic() + soak_s
            while True:
                report.failed = {}
                for agent in self._views(members):
                    why = (_why_failed(agent, models) if _reported(agent, revision, models)
                           else "did not report within the convergence timeout")
                    if why:
                        report.failed[agent.agent_id] = why
                if budget.exceeded(len(report.failed), len(members)):
                    self.say(f"wave {wave}: {len(report.failed)} of {len(members)} failed; "
                             "halting and restoring the previous state")
                    self._restore(result, models, baseline, revision + 1, members)
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.broker.wait_until(lambda: False, min(left, 1.0))
            self.say(f"wave {wave}: {len(members) - len(report.failed)} of {len(members)} "
                     f"ok after a {soak_s:g} s soak")
            revision += 1
        return result

    def _restore(self, result: RolloutResult, models: Mapping[str, p.ModelTarget],
                 baseline: Mapping[str, p.ModelTarget], revision: int,
                 changed: Sequence[str]) -> None:
        """Publish everyone back on ``baseline`` and wait for the ``changed`` agents to
        report it. On a first rollout the baseline has none of ``models``: the agents remove
        what the fleet put there (a model deployed on a device itself stays)."""
        result.halted, result.restored_revision = True, revision
        self._publish(p.Desired(self.group, revision, dict(models), 0.0, dict(baseline),
                                issued_at=time.time(), note="halted: previous state restored"))
        dropped = [m for m in models if m not in baseline]

        def back(agent: AgentView) -> bool:
            return agent.online and agent.revision >= revision and all(
                agent.model_state(m, t.ref) == "ok" for m, t in baseline.items()) and not any(
                m in agent.models for m in dropped)

        self.broker.wait_until(lambda: all(back(a) or not a.online
                                           for a in self._views(changed)),
                               self.converge_timeout_s)
        for agent in self._views(changed):
            if back(agent):
                result.restored.append(agent.agent_id)
            else:
                result.not_restored[agent.agent_id] = (
                    _why_failed(agent, baseline)
                    or ("still reports " + ", ".join(m for m in dropped if m in agent.models)
                        if any(m in agent.models for m in dropped) else "pending"))


def rollback(broker: FleetBroker, group: str, key: Ed25519PrivateKey) -> p.Desired:
    """Publish the group's previous models as a new revision for every agent."""
    current = broker.current(group)
    if current is None or not current.previous:
        raise ConsoleError(f"group {group} has no previous desired state to roll back to")
    revision = max([current.revision, *(a.revision for a in broker.group_agents(group))]) + 1
    desired = p.Desired(group, revision, dict(current.previous), 100.0, dict(current.models),
                        issued_at=time.time(), note=f"rollback of revision {current.revision}")
    broker.publish(desired, key)
    return desired
