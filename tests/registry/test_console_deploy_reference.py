"""The console's deploy screen deploys by reference: an ``oci://`` reference typed in the
screen is resolved to a digest once, each real agent process is asked (CheckDeploy, fed the
bundle's manifest and signature read from a real docker-registry) and then pulls the bundle
itself (DeployReference), the canary first."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Checkbox, DataTable, Input, SelectionList

from console.app import EdgeConsoleApp
from console.config import StaticAgent
from console.fleet import AgentState
from console.rollout.staged import Phase, RolloutOutcome
from console.screens.confirm import ConfirmScreen
from console.screens.deploy import DeployScreen
from packager.bundle.oci.client import RegistryClient, RegistryOptions
from packager.bundle.oci.head import read_bundle_head
from packager.bundle.oci.ref import parse_reference
from packager.bundle.reader import open_bundle
from packager.cli import main as edge_pack
from tests.console_tui.conftest import console_app, wait_for
from tests.registry.registry_proc import BINARY, SKIP_REASON, RegistryProcess, running_registry
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess

pytestmark = [pytest.mark.slow, pytest.mark.skipif(BINARY is None, reason=SKIP_REASON)]


@dataclass
class Site:
    registry: RegistryProcess
    agents: tuple[AgentProcess, AgentProcess]
    bundles: Bundles

    def push(self, bundle: Path, tag: str) -> str:
        ref = f"oci://{self.registry.address}/edge/mlp:{tag}"
        assert edge_pack(["push", str(bundle), ref, "--insecure", "-q"]) == 0
        return ref

    def active(self, agent: AgentProcess) -> int | None:
        with agent.client() as c:
            return next((v.version for v in c.models("mlp") if v.active), None)

    def app(self) -> EdgeConsoleApp:
        tokens = {a.management: (a.state_dir / "management.token").read_text().strip()
                  for a in self.agents}
        static = tuple(StaticAgent("127.0.0.1", int(a.management.rsplit(":")[1]), name)
                       for a, name in zip(self.agents, ("alpha", "beta"), strict=True))
        return console_app(discovery=False, tokens=tokens, agents=static)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from tests.support.bundles import build_all

    root = tmp_path_factory.mktemp("console-site")
    bundles = build_all(root / "bundles")
    with running_registry(root / "registry") as reg:
        started = []
        for name in ("a", "b"):
            (root / name).mkdir()
            config = root / name / "agent.toml"
            config.write_text(f"[registry]\nallow = {json.dumps([f'{reg.address}/edge'])}\n"
                              f"insecure = {json.dumps([reg.address])}\nretries = 2\n")
            started.append(AgentProcess(root / name / "state", trust=bundles.public_key,
                                        extra=["--no-mdns", "--config", str(config)]))
        with started[0] as a, started[1] as b:
            yield Site(reg, (a, b), bundles)


def test_bundle_head_is_read_from_the_registry_without_the_bundle(site: Site) -> None:
    ref = site.push(site.bundles.mlp[1], "head")
    client = RegistryClient(parse_reference(ref), RegistryOptions(insecure=True))
    from packager.bundle.oci.transfer import resolve

    resolved = resolve(parse_reference(ref), RegistryOptions(insecure=True))
    head = read_bundle_head(client, resolved.entries[0])
    with open_bundle(site.bundles.mlp[1]) as reader:
        assert head.manifest == reader.manifest_bytes
        assert head.signature == reader.signature
    assert head.size == site.bundles.mlp[1].stat().st_size
    assert (head.info.name, head.info.version) == ("mlp", 1)


def test_bundle_head_members_span_several_reads() -> None:
    """A manifest larger than the first read: the tar parser says how far to read."""
    import io
    import tarfile

    from packager.bundle.oci.head import FIRST_READ, _members

    manifest, sig = b"{" + b" " * (FIRST_READ + 1000) + b"}", b"s" * 64
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("manifest.json", manifest), ("manifest.sig", sig),
                           ("model.onnx", b"x" * 5000)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    whole = buf.getvalue()
    found, needed = _members(whole[:FIRST_READ], 2)
    assert found == {} and needed == 512 + len(manifest)
    found, needed = _members(whole[:needed + 300], 2)  # the manifest, part of the next header
    assert found == {"manifest.json": manifest} and needed > 0
    for _ in range(2):  # the next header, then the signature's data
        found, needed = _members(whole[:needed], 2)
    assert found == {"manifest.json": manifest, "manifest.sig": sig} and needed == 0


async def _resolve_in_screen(pilot, screen: DeployScreen, ref: str) -> None:  # type: ignore[no-untyped-def]
    screen.reference = None
    screen.query_one("#registry-insecure", Checkbox).value = True
    field = screen.query_one("#reference-input", Input)
    field.value = ref
    field.focus()
    await pilot.press("enter")
    await wait_for(pilot, lambda: screen.reference is not None, f"{ref} resolved", 60)


async def _roll(pilot, app: EdgeConsoleApp, screen: DeployScreen) -> None:  # type: ignore[no-untyped-def]
    targets = screen.query_one("#target-list", SelectionList)
    await wait_for(pilot, lambda: targets.option_count == 2, "two targets listed")
    targets.select_all()
    beta = app.fleet.find("beta")
    assert beta is not None
    screen.canary = beta.key
    await pilot.pause()
    screen.query_one("#soak-input", Input).value = "0"
    await pilot.press("ctrl+s")
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("y")
    await wait_for(pilot, lambda: screen.outcome is not None, "the rollout to end", 120)


async def test_deploy_screen_rolls_out_an_oci_reference(site: Site) -> None:
    unsigned = site.push(site.bundles.unsigned, "unsigned")
    good = site.push(site.bundles.mlp[1], "1")
    arm = site.push(site.bundles.arm64, "arm")
    app = site.app()
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: len(app.fleet.agents()) == 2 and all(
            a.state is AgentState.ONLINE for a in app.fleet.agents()), "both online", 60)
        await pilot.press("D")
        screen = app.screen
        assert isinstance(screen, DeployScreen)

        # a bad reference: one clear line, nothing picked
        field = screen.query_one("#reference-input", Input)
        field.value = f"oci://{site.registry.address}/edge/mlp:nope"
        screen.query_one("#registry-insecure", Checkbox).value = True
        field.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: "resolving" not in str(
            screen.query_one("#picked-bundles").render()), "the failed resolve shown", 60)
        assert screen.reference is None

        # built for arm64 only: both targets shown refused (with the reason), none tickable
        await _resolve_in_screen(pilot, screen, arm)
        targets = screen.query_one("#target-list", SelectionList)
        await wait_for(pilot, lambda: targets.option_count == 2 and all(
            targets.get_option_at_index(i).disabled for i in range(2)), "both refused", 60)
        assert all("arm64" in str(targets.get_option_at_index(i).prompt) for i in range(2))
        targets.select_all()
        await pilot.pause()
        assert targets.selected == []

        # an unsigned bundle: each agent's CheckDeploy refuses it before any pull
        await _resolve_in_screen(pilot, screen, unsigned)
        await _roll(pilot, app, screen)
        outcome = screen.outcome
        assert outcome is not None and not outcome.ok
        assert {p.phase for p in outcome.targets.values()} == {Phase.REFUSED}
        assert all("refused before the pull" in p.message and "sign" in p.message
                   for p in outcome.targets.values()), outcome.targets
        assert [site.active(a) for a in site.agents] == [None, None]

        # the signed one: the canary (beta) first, each agent pulls it itself
        await _resolve_in_screen(pilot, screen, good)
        resolved: Any = screen.reference
        assert "@sha256:" in resolved.reference.pinned()
        await _roll(pilot, app, screen)
        done: RolloutOutcome | None = screen.outcome
        assert done is not None
        assert done.ok, done.message
        progress = {p.name: p for p in done.targets.values()}
        assert {n: p.phase for n, p in progress.items()} == {"alpha": Phase.DONE,
                                                             "beta": Phase.DONE}
        assert progress["beta"].canary and not progress["alpha"].canary
        assert all(p.sent == p.total > 0 for p in progress.values()), progress
        assert all(p.bundles[0].startswith("mlp v1 (oci://") for p in progress.values())
        assert screen.query_one("#steps-table", DataTable).row_count >= 2
        assert [site.active(a) for a in site.agents] == [1, 1]
        job = app.rollouts.get(screen.job.id)  # type: ignore[union-attr]
        assert job is not None and job.title.startswith("mlp v1 (oci://")
