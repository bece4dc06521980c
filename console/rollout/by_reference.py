"""A staged rollout by reference: every target pulls one ``oci://...@sha256:...`` from the
registry itself (DeployReference) instead of receiving an upload. Fit, canary, soak and roll
back are :class:`console.rollout.staged.Rollout`'s; what differs is the pick (the registry's
entry for each agent's profile), the pre-check and the deploy call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from console.connections import Connections
from console.errors import ConsoleError
from console.fleet import FleetAgent
from console.rollout.staged import Phase, Rollout, TargetProgress
from edge_agent.client.agent_client import AgentClient
from edge_agent.client.types import StepInfo


def reference_label(resolved: Any) -> str:
    """``mlp v2 (oci://host/edge/mlp@sha256:0123456789ab)`` for a resolved reference."""
    pinned = resolved.reference.pinned()
    return f"{resolved.name} v{resolved.version} ({pinned[:pinned.index('@') + 20]})"


def reference_mismatch(resolved: Any, agent: FleetAgent) -> str | None:
    """Why no entry of ``resolved`` fits ``agent`` by its advertised profile and arch (None:
    fine, or not known yet). The authoritative pick runs against GetInfo before the deploy."""
    from packager.bundle.oci.layout import ARCH, PROFILE

    if not agent.profile:
        return None
    if any(e.annotations.get(PROFILE) == agent.profile or e.annotations.get(ARCH) == agent.arch
           for e in resolved.entries):
        return None
    held = ", ".join(sorted(str(e.annotations.get(PROFILE)) for e in resolved.entries))
    return (f"{resolved.name} v{resolved.version} in the registry is built for {held}; "
            f"{agent.name} runs {agent.profile}: push one with `edge-pack build --profile "
            f"{agent.profile}` and `edge-pack push`")


def bundle_head(resolved: Any, entry: Any, *, insecure: bool = False,
                registry_config: Path | None = None, ca_file: Path | None = None) -> Any:
    """The manifest and signature of the bundle ``entry`` names (a
    :class:`packager.bundle.oci.head.BundleHead`), read from the registry with a small Range
    request: what the agent's CheckDeploy needs, without pulling the bundle."""
    from packager.bundle.oci.client import (
        RegistryClient,
        RegistryOptions,
        credentials_from_config,
        docker_config_path,
    )
    from packager.bundle.oci.head import read_bundle_head

    ref = resolved.reference
    creds = credentials_from_config(registry_config or docker_config_path(), ref.registry,
                                    required=registry_config is not None)
    client = RegistryClient(ref, RegistryOptions(insecure=insecure, credentials=creds,
                                                 ca_file=ca_file))
    return read_bundle_head(client, entry)


class ReferenceRollout(Rollout):
    """A :class:`Rollout` of one resolved (pinned) reference. :meth:`run` blocks."""

    def __init__(self, connections: Connections, resolved: Any,
                 targets: Sequence[FleetAgent], *, canary: str | None, soak_s: float,
                 report: Callable[[TargetProgress], None],
                 cancelled: Callable[[], bool] = lambda: False,
                 check: Callable[[Any, Any], Any] | None = None) -> None:
        super().__init__(connections, (), targets, canary=canary, soak_s=soak_s,
                         report=report, cancelled=cancelled)
        self.resolved = resolved
        self.pinned: str = resolved.reference.pinned()
        # (entry) -> CheckDeploy arguments for that profile's bundle, or None (see refusal)
        self._check = check
        self._entries: dict[str, Any] = {}
        self._heads: dict[str, Any] = {}  # entry digest -> its bundle's head

    def deployed(self, agent: FleetAgent) -> list[tuple[str, int]]:
        return [(self.resolved.name, self.resolved.version)]

    def check_fit(self) -> list[FleetAgent]:
        """The registry's entry for each target's profile (as the agent will pick it); targets
        without one, or whose agent would refuse the bundle, are REFUSED before any pull."""
        from packager.bundle.errors import PackagerError
        from packager.bundle.oci.layout import choose_entry

        fitting = []
        for agent in self.targets:
            try:
                info = self.connections.call(agent, lambda c: c.info())
                entry = choose_entry(self.resolved.entries, info.profile, info.arch,
                                     info.runtimes, self.pinned)
                refused = self.reference_refusal(agent, entry)
            except (PackagerError, ConsoleError) as exc:
                self._update(agent.key, phase=Phase.REFUSED, message=str(exc))
                continue
            if refused:
                self._update(agent.key, phase=Phase.REFUSED, message=refused)
                continue
            self._entries[agent.key] = entry
            self._update(agent.key, bundles=(reference_label(self.resolved),))
            fitting.append(agent)
        return fitting

    def reference_refusal(self, agent: FleetAgent, entry: Any) -> str:
        """Why ``agent`` would refuse the bundle of ``entry`` (its CheckDeploy, fed the
        bundle's manifest and signature read from the registry), or ""."""
        from packager.bundle.errors import PackagerError

        if self._check is None:
            return ""
        head = self._heads.get(entry.digest)
        if head is None:  # read once per profile, however many agents run it
            try:
                head = self._heads[entry.digest] = self._check(self.resolved, entry)
            except PackagerError:  # not readable from here: the agent's own checks still run
                return ""
        check = self.connections.call(agent, partial(
            AgentClient.check_deploy_manifest, manifest=head.manifest,
            signature=head.signature, size=head.size, filename=head.filename))
        if check is not None and not check.ok:
            return f"refused before the pull: {check.message}"
        return ""

    def deploy_to(self, agent: FleetAgent) -> bool:
        """Have ``agent`` pull and deploy the pinned reference; True when it committed."""
        self._update(agent.key, phase=Phase.DEPLOYING)
        steps: list[StepInfo] = []

        def on_progress(pulled: int, total: int) -> None:
            self._update(agent.key, sent=pulled, total=total)

        def on_step(step: StepInfo) -> None:
            steps.append(step)
            self._update(agent.key, steps=tuple(steps), message=f"{step.step}: {step.message}")

        try:
            self.remember_active(agent, self.resolved.name)
            result = self.connections.call(agent, partial(
                AgentClient.deploy_reference, reference=self.pinned, on_progress=on_progress,
                on_step=on_step))
        except ConsoleError as exc:
            self._update(agent.key, phase=Phase.FAILED, message=str(exc))
            return False
        if not result.ok:
            self._update(agent.key, phase=Phase.FAILED, message=result.message)
            return False
        self._update(agent.key, message=result.message)
        return True
