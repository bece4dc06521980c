"""What the scripting subcommands do, on top of the management client (no printing here
except through the ``report`` callbacks the CLI passes in)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.config import ConsoleSettings, parse_address
from console.discovery import AgentBrowser
from console.errors import (
    BundleRejectedError,
    ConsoleConfigError,
    DeploymentFailedError,
    RolloutAbortedError,
)
from console.known_agents import open_client
from edge_agent.client.agent_client import AgentClient, AuthenticationError, ManagementError
from edge_agent.client.types import (
    AgentInfo,
    DeploymentInfo,
    DeployResult,
    StepInfo,
    TuningInfo,
    VersionInfo,
)
from edge_agent.deploy.compat import check_fits
from edge_agent.deploy.device import DeviceInfo
from edge_agent.deploy.errors import IncompatibleBundleError
from packager.bundle.errors import PackagerError
from packager.bundle.manifest import Manifest
from packager.bundle.reader import open_bundle


def parse_target(value: str, where: str = "--agent") -> str:
    """Validate HOST:PORT (an agent's management address)."""
    host, port = parse_address(value, where=where)
    return f"{host}:{port}"


def read_token(path: Path) -> str:
    """The token in ``path`` (one line)."""
    try:
        token = Path(path).expanduser().read_text().strip()
    except OSError as exc:
        raise ConsoleConfigError(f"--token-file: cannot read {path}: {exc.strerror}") from None
    if not token:
        raise ConsoleConfigError(f"--token-file: {path} is empty; on the agent run "
                                 "`edge-agent token --state-dir DIR` and save its output there")
    return token


def connect(target: str, settings: ConsoleSettings, token_file: Path | None,
            timeout_s: float = 10.0) -> AgentClient:
    """A client for ``target``: the token from ``--token-file``, else the console config; TLS
    with the agent's pinned certificate (console.known_agents), a CA, or --insecure."""
    if token_file is not None:
        return open_client(target, settings, read_token(token_file), timeout_s=timeout_s)
    token = settings.token_for(address=target)
    client = open_client(target, settings, token, timeout_s=timeout_s)
    named = _named_tokens(settings, target)
    if not named:
        return client  # a token of its own (static entry or keyed by this address), or no other
    try:
        client.info()
        return client  # the default token (or none) is enough
    except AuthenticationError:
        pass
    for key, candidate in named.items():  # [tokens] keyed by agent name or id
        other = open_client(target, settings, candidate, timeout_s=timeout_s)
        try:
            info = other.info()
        except AuthenticationError:
            other.close()
            continue
        if key in (info.name, info.agent_id):  # the agent's own name: its token
            client.close()
            return other
        other.close()
    return client  # refused: its calls say so


def _named_tokens(settings: ConsoleSettings, address: str) -> dict[str, str]:
    """[tokens] keyed by an agent's name or id (not by an address), unless ``address`` has a
    token of its own."""
    if address in settings.tokens or any(a.address == address and a.token
                                         for a in settings.agents):
        return {}
    out = {}
    for key, token in settings.tokens.items():
        try:
            parse_address(key, where="[tokens]")
        except ConsoleConfigError:
            out[key] = token  # not HOST:PORT: a name or an id
    return out


# -- agents ------------------------------------------------------------------------------------

@dataclass
class AgentRow:
    """One agent for ``edge-console agents``."""

    address: str
    source: str  # "mdns" or "given"
    name: str = ""
    id: str = ""
    arch: str = ""
    profile: str = ""
    api: str = ""
    inference_port: int | None = None
    models: str = ""
    reachable: bool | None = None
    error: str = ""


async def _browse(interfaces: Sequence[str] | None, timeout_s: float) -> list[AgentRow]:
    try:
        async with AgentBrowser(interfaces=interfaces) as browser:
            await asyncio.sleep(timeout_s)
            found = browser.agents()
    except OSError as exc:  # e.g. an interface address this machine does not have
        where = f"on {', '.join(interfaces)}" if interfaces else "on every interface"
        raise ConsoleConfigError(
            f"mDNS discovery {where} failed ({exc.strerror or exc}); choose addresses of this "
            "machine with --mdns-interface or [discovery] interfaces, or pass --no-mdns"
        ) from None
    return [AgentRow(address=f"{a.host}:{a.port}", source="mdns", name=a.name, id=a.id,
                     arch=a.arch, profile=a.profile, api=a.api, inference_port=a.grpc_port,
                     models=a.txt.get("models", "")) for a in found]


def list_agents(given: Sequence[str], settings: ConsoleSettings, token_file: Path | None, *,
                interfaces: Sequence[str] | None, timeout_s: float,
                browse: bool = True) -> list[AgentRow]:
    """Agents found by mDNS within ``timeout_s`` plus the ``given`` ones (asked GetInfo)."""
    rows = asyncio.run(_browse(interfaces, timeout_s)) if browse else []
    seen = {r.address for r in rows}
    for target in given:
        if target in seen:
            continue
        row = AgentRow(address=target, source="given")
        try:
            with connect(target, settings, token_file, timeout_s=max(timeout_s, 2.0)) as c:
                info = c.info()
                row.name, row.id, row.arch = info.name, info.agent_id, info.arch
                row.profile, row.api = info.profile, info.api_version
                port = info.inference_address.rpartition(":")[2]
                row.inference_port = int(port) if port.isdigit() else None
                row.models = ",".join(f"{v.model}:{v.version}" for v in c.models() if v.active)
                row.reachable = True
        except ManagementError as exc:
            row.reachable, row.error = False, str(exc)
        rows.append(row)
    return rows


# -- status ------------------------------------------------------------------------------------

@dataclass
class AgentStatus:
    """GetInfo, ListModels and the recent history of one agent."""

    address: str
    info: AgentInfo
    versions: list[VersionInfo]
    deployments: list[DeploymentInfo] = field(default_factory=list)
    parity: list[VersionParity] = field(default_factory=list)
    tuning: list[TuningInfo] = field(default_factory=list)  # the last run per model


@dataclass(frozen=True)
class VersionParity:
    """The latest on-device parity check of one version (the deploy pipeline's parity step):
    ``passed`` None when the bundle carried no reference data; ``figures`` in short."""

    model: str
    version: int
    passed: bool | None
    figures: str
    message: str


_FIGURES = re.compile(r"max abs error (\S+), max rel error (\S+), top-1 agreement (\S+)")


def _parity(model: str, version: int, ok: bool, message: str) -> VersionParity:
    found = _FIGURES.search(message)
    passed = None if found is None and ok else ok
    figures = ("not checked (no reference data)" if passed is None else
               f"{'ok' if ok else 'FAILED'}: abs {found[1]}, rel {found[2]}, "
               f"top-1 {found[3].rstrip(',')}" if found else ("ok" if ok else "FAILED"))
    return VersionParity(model, version, passed, figures, message)


def version_parity(deployments: Sequence[DeploymentInfo],
                   versions: Sequence[VersionInfo] = ()) -> list[VersionParity]:
    """Per model version, the figures the agent keeps for it (``versions``), else its most
    recent parity step in ``deployments`` (newest first; agents before the stored figures)."""
    seen: dict[tuple[str, int], VersionParity] = {
        (v.model, v.version): _parity(v.model, v.version, *v.parity)
        for v in versions if v.parity is not None}
    for d in deployments:
        step = next((s for s in d.steps if s.step == "parity"), None)
        if step is None or d.to_version is None or (d.model, d.to_version) in seen:
            continue
        seen[(d.model, d.to_version)] = _parity(d.model, d.to_version, step.ok, step.message)
    return list(seen.values())


def agent_status(target: str, settings: ConsoleSettings, token_file: Path | None,
                 history: int = 10) -> AgentStatus:
    """Everything ``edge-console status`` shows for one agent (each version's parity figures as
    the agent keeps them)."""
    with connect(target, settings, token_file) as c:
        deployments = c.deployments(limit=max(history, 50))
        versions = c.models()
        return AgentStatus(target, c.info(), versions, deployments[:history],
                           version_parity(deployments, versions), last_tuning(c))


def last_tuning(client: AgentClient) -> list[TuningInfo]:
    """The last tuning run of each model ([] from an agent that stores none)."""
    try:
        return client.tuning(latest_only=True)
    except ManagementError as exc:
        if exc.status == "UNIMPLEMENTED":  # an agent older than tuning
            return []
        raise


# -- deploy ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LocalBundle:
    """A bundle file on the operator's machine and its manifest."""

    path: Path
    manifest: Manifest


def read_bundles(paths: Sequence[Path]) -> list[LocalBundle]:
    """Open each bundle (structure checked) and keep its manifest."""
    out = []
    for p in paths:
        try:
            with open_bundle(Path(p)) as reader:
                out.append(LocalBundle(Path(p), reader.manifest))
        except PackagerError as exc:  # the reader's messages start with the path already
            text = str(exc)
            raise BundleRejectedError(text if str(p) in text else f"{p}: {text}") from None
    return out


def verify_bundle_files(bundles: Sequence[LocalBundle]) -> None:
    """Re-hash every file of every bundle against its manifest, locally, before any upload
    (BundleRejectedError naming the bundle and file that differ)."""
    for b in bundles:
        try:
            with open_bundle(b.path) as reader:
                if reader.manifest != b.manifest:
                    raise BundleRejectedError(f"{b.path}: the bundle changed on disk since it "
                                              "was picked; pick it again")
                reader.verify_files()
        except PackagerError as exc:
            text = str(exc)
            raise BundleRejectedError(text if str(b.path) in text else f"{b.path}: {text}"
                                      ) from None


def pick_bundle(candidates: Sequence[LocalBundle], info: AgentInfo) -> LocalBundle:
    """The bundle for this agent: its exact profile if given, else any that fits its arch and
    runtimes (the agent's compatibility rule); BundleRejectedError naming the agent's profile
    if none."""
    device = DeviceInfo(arch=info.arch, runtimes=info.runtimes, profile=info.profile)
    fitting, reasons = [], []
    for b in candidates:
        try:
            check_fits(b.manifest, device)
            fitting.append(b)
        except IncompatibleBundleError as exc:
            reasons.append(str(exc))
    if not fitting:
        m = candidates[0].manifest
        raise BundleRejectedError(
            f"no bundle of {m.name} version {m.version} fits agent {info.name} (profile "
            f"{info.profile}, {info.arch}, runtimes "
            f"{', '.join(info.runtimes)}); build one with `edge-pack build --profile "
            f"{info.profile}`")
    exact = [b for b in fitting if b.manifest.profile == info.profile]
    return (exact or fitting)[0]


@dataclass
class DeployReport:
    """What happened on one agent for one model version."""

    agent: str
    bundle: str
    result: DeployResult | None
    error: str = ""
    skipped: str = ""  # why nothing was done (e.g. the version is already active)
    refusal: str = ""  # the agent refused it before the upload (CheckDeploy's code)

    @property
    def ok(self) -> bool:
        return bool(self.skipped) or (self.result is not None and self.result.ok)


def deploy(bundle_paths: Sequence[Path], agents: Sequence[str], settings: ConsoleSettings,
           token_file: Path | None, *, canary: str | None = None, force: bool = False,
           on_step: Callable[[str, StepInfo], None] | None = None,
           on_progress: Callable[[str, int, int], None] | None = None) -> list[DeployReport]:
    """Deploy every model in ``bundle_paths`` to every agent, the canary first.

    Each agent gets the bundle built for it. When the canary fails, the others are left
    alone (RolloutAbortedError). Raises DeploymentFailedError after trying, when anything
    failed.
    """
    bundles = read_bundles(bundle_paths)
    verify_bundle_files(bundles)  # every file hashed locally before anything is uploaded
    groups: dict[tuple[str, int], list[LocalBundle]] = {}
    for b in bundles:
        groups.setdefault((b.manifest.name, b.manifest.version), []).append(b)
    rest = [a for a in dict.fromkeys(agents) if a != canary]
    reports: list[DeployReport] = []
    if canary:
        reports += _deploy_to(canary, groups, settings, token_file, force, on_step,
                              on_progress)
        if not all(r.ok for r in reports):
            raise RolloutAbortedError(
                f"canary {canary} failed ({_first_failure(reports)}); not deploying to "
                f"the other {len(rest)} agent(s)", reports)
    # the rest in parallel (each agent's own pipeline runs its models one after another)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(rest)))) as pool:
        for agent_reports in pool.map(lambda t: _deploy_to(t, groups, settings, token_file,
                                                           force, on_step, on_progress), rest):
            reports += agent_reports
    failed = [r for r in reports if not r.ok]
    if failed:
        raise DeploymentFailedError(f"{len(failed)} of {len(reports)} deployment(s) failed; "
                                    f"first: {failed[0].agent}: {_first_failure(failed)}",
                                    reports)
    return reports


def _first_failure(reports: Sequence[DeployReport]) -> str:
    for r in reports:
        if not r.ok:
            return r.error or (r.result.message if r.result else "unknown error")
    return ""


def _deploy_to(target: str, groups: dict[tuple[str, int], list[LocalBundle]],
               settings: ConsoleSettings, token_file: Path | None, force: bool,
               on_step: Callable[[str, StepInfo], None] | None,
               on_progress: Callable[[str, int, int], None] | None) -> list[DeployReport]:
    reports = []
    try:
        client = connect(target, settings, token_file)
    except ManagementError as exc:
        return [DeployReport(target, "", None, str(exc))]
    with client:
        try:
            info = client.info()
        except ManagementError as exc:
            return [DeployReport(target, "", None, str(exc))]
        for candidates in groups.values():
            try:
                chosen = pick_bundle(candidates, info)
            except BundleRejectedError as exc:  # the agent's fit rule, applied here
                reports.append(DeployReport(target, candidates[0].path.name, None, str(exc),
                                            refusal="incompatible"))
                continue
            name, version = chosen.manifest.name, chosen.manifest.version
            try:
                if not force and any(v.active and v.version == version
                                     for v in client.models(name)):
                    reports.append(DeployReport(target, chosen.path.name, None,
                                                skipped=f"{name} version {version} is already "
                                                "active (use --force to reload it)"))
                    continue
                check = client.check_deploy(chosen.path, force=force)
                if check is not None and not check.ok:  # refused: nothing uploaded
                    reports.append(DeployReport(target, chosen.path.name, None,
                                                f"refused before the upload: {check.message}",
                                                refusal=check.refusal))
                    continue
                result = client.deploy(
                    chosen.path, force=force,
                    on_step=(lambda s: on_step(target, s)) if on_step else None,
                    on_progress=(lambda a, b: on_progress(target, a, b)) if on_progress
                    else None)
                reports.append(DeployReport(target, chosen.path.name, result))
            except ManagementError as exc:
                reports.append(DeployReport(target, chosen.path.name, None, str(exc)))
    return reports


# -- rollback ----------------------------------------------------------------------------------

def rollback_plan(client: AgentClient, model: str) -> tuple[int | None, int | None, str]:
    """``(active, target, why)``: where a rollback of ``model`` on this agent would go, by the
    agent's own rule (:mod:`edge_agent.rollback_rule`), read from its versions and history."""
    from edge_agent.rollback_rule import rollback_target

    versions = client.models(model)
    active = next((v.version for v in versions if v.active), None)
    if active is None:
        return None, None, f"{model} has no active version on this agent"
    usable = {v.version for v in versions if v.stored_state != "failed"}
    target, why = rollback_target(active, usable, client.deployments(model, limit=500))
    return active, target, why


def rollback(model: str, agents: Sequence[str], settings: ConsoleSettings,
             token_file: Path | None, to_version: int | None = None, *,
             preview: Callable[[str, str], None] | None = None,
             dry_run: bool = False) -> list[DeployReport]:
    """Roll ``model`` back on every agent; DeploymentFailedError when any did not commit.

    Each agent's target is worked out first and shown (``preview(agent, line)``) before
    anything changes; the rollback then names that version, so what happens is what was
    shown. ``dry_run`` stops after showing."""
    reports = []
    for target in agents:
        try:
            with connect(target, settings, token_file) as c:
                version = to_version
                if version is None:
                    active, version, why = rollback_plan(c, model)
                    if version is None:
                        reports.append(DeployReport(target, model, None, why))
                        continue
                    line = f"{model}: version {active} -> {version} ({why})"
                else:
                    line = f"{model}: -> version {version} (--to-version)"
                if preview is not None:
                    preview(target, line)
                if dry_run:
                    reports.append(DeployReport(target, model, None,
                                                skipped=f"dry run: would roll back {line}"))
                    continue
                reports.append(DeployReport(target, model, c.rollback(model, version)))
        except ManagementError as exc:
            reports.append(DeployReport(target, model, None, str(exc)))
    failed = [r for r in reports if not r.ok]
    if failed:
        raise DeploymentFailedError(f"rollback of {model} failed on {failed[0].agent}: "
                                    f"{_first_failure(failed)}", reports)
    return reports


# -- remove ------------------------------------------------------------------------------------

def remove(model: str, version: int, agents: Sequence[str], settings: ConsoleSettings,
           token_file: Path | None) -> list[DeployReport]:
    """Delete ``model`` ``version`` (not the active one) from every agent's disk, without a
    question; DeploymentFailedError when any agent refused (the active version, no such
    version) or could not be reached."""
    reports = []
    for target in agents:
        try:
            with connect(target, settings, token_file) as c:
                reports.append(DeployReport(target, model, c.remove(model, version)))
        except ManagementError as exc:
            reports.append(DeployReport(target, model, None, str(exc)))
    failed = [r for r in reports if not r.ok]
    if failed:
        raise DeploymentFailedError(f"remove of {model} version {version} failed on "
                                    f"{failed[0].agent}: {_first_failure(failed)}", reports)
    return reports


# -- deploy by reference -----------------------------------------------------------------------

def resolve_reference(text: str, *, insecure: bool = False,
                      registry_config: Path | None = None, ca_file: Path | None = None) -> Any:
    """Resolve ``oci://...:TAG`` to the digest of what it names (every agent then gets the
    same bytes); credentials from ``registry_config`` or the docker config. Returns a
    :class:`packager.bundle.oci.transfer.Resolved`; BundleRejectedError with one line on failure."""
    from packager.bundle.oci.client import (
        RegistryOptions,
        credentials_from_config,
        docker_config_path,
    )
    from packager.bundle.oci.ref import parse_reference
    from packager.bundle.oci.transfer import resolve

    try:
        ref = parse_reference(text)
        creds = credentials_from_config(registry_config or docker_config_path(), ref.registry,
                                        required=registry_config is not None)
        return resolve(ref, RegistryOptions(insecure=insecure, credentials=creds,
                                            ca_file=ca_file))
    except PackagerError as exc:
        raise BundleRejectedError(str(exc)) from None


def deploy_reference(reference: str, agents: Sequence[str], settings: ConsoleSettings,
                     token_file: Path | None, *, canary: str | None = None,
                     force: bool = False, insecure_registry: bool = False,
                     registry_config: Path | None = None, registry_ca: Path | None = None,
                     on_step: Callable[[str, StepInfo], None] | None = None,
                     on_progress: Callable[[str, int, int], None] | None = None
                     ) -> list[DeployReport]:
    """Deploy by reference: resolve ``reference`` to a digest here, then have every agent
    pull the bundle for its own profile from the registry (the canary first), as
    :func:`deploy` does with files."""
    resolved = resolve_reference(reference, insecure=insecure_registry,
                                 registry_config=registry_config, ca_file=registry_ca)
    rest = [a for a in dict.fromkeys(agents) if a != canary]

    def one(target: str) -> list[DeployReport]:
        return [_deploy_reference_to(target, resolved, settings, token_file, force, on_step,
                                     on_progress)]

    reports: list[DeployReport] = []
    if canary:
        reports += one(canary)
        if not all(r.ok for r in reports):
            raise RolloutAbortedError(
                f"canary {canary} failed ({_first_failure(reports)}); not deploying to "
                f"the other {len(rest)} agent(s)", reports)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(rest)))) as pool:
        for agent_reports in pool.map(one, rest):
            reports += agent_reports
    failed = [r for r in reports if not r.ok]
    if failed:
        raise DeploymentFailedError(f"{len(failed)} of {len(reports)} deployment(s) failed; "
                                    f"first: {failed[0].agent}: {_first_failure(failed)}",
                                    reports)
    return reports


def _deploy_reference_to(target: str, resolved: Any, settings: ConsoleSettings,
                         token_file: Path | None, force: bool,
                         on_step: Callable[[str, StepInfo], None] | None,
                         on_progress: Callable[[str, int, int], None] | None) -> DeployReport:
    from packager.bundle.errors import ArtifactNotFoundError
    from packager.bundle.oci.layout import choose_entry

    pinned = resolved.reference.pinned()
    label = f"{resolved.name} version {resolved.version}"
    try:
        client = connect(target, settings, token_file)
    except ManagementError as exc:
        return DeployReport(target, label, None, str(exc))
    with client:
        try:
            info = client.info()
            try:  # the agent's fit rule, applied here: no pull for a profile not there
                choose_entry(resolved.entries, info.profile, info.arch, info.runtimes, pinned)
            except ArtifactNotFoundError as exc:
                return DeployReport(target, label, None, str(exc), refusal="incompatible")
            if not force and any(v.active and v.version == resolved.version
                                 for v in client.models(resolved.name)):
                return DeployReport(target, label, None, skipped=f"{label} is already active "
                                    "(use --force to reload it)")
            result = client.deploy_reference(
                pinned, force=force,
                on_step=(lambda s: on_step(target, s)) if on_step else None,
                on_progress=(lambda a, b: on_progress(target, a, b)) if on_progress else None)
            return DeployReport(target, label, result)
        except ManagementError as exc:
            return DeployReport(target, label, None, str(exc))
