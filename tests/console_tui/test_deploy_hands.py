"""The deploy view: tick boxes that read as tick boxes, the canary marked in the target list
with a key, refused targets' reasons wrapped (not clipped), the last bundle folder remembered,
and bundle files hashed locally before any upload (a corrupt bundle reaches no agent)."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

from console.config import ConsoleSettings, StaticAgent
from console.screens.deploy import DeployScreen
from console.widgets.target_list import TargetList
from edge_agent.client.agent_client import AgentClient
from tests.console_tui.agents import BundleSet, RunningAgent
from tests.console_tui.conftest import wait_for
from tests.console_tui.test_deploy_live import _app_for
from tests.console_tui.test_snapshots import _app, _fill_fleet


def _lines(targets: TargetList) -> list[str]:
    return [targets.render_line(y).text for y in range(targets.size.height)]


async def test_tick_boxes_canary_key_and_wrapped_refusals(bundles: BundleSet) -> None:
    app = _app()
    async with app.run_test(size=(100, 40)) as pilot:
        _fill_fleet(app)
        screen = DeployScreen(["id-kitchen-pi"], root=bundles.arm64.parent)
        await app.push_screen(screen)
        await pilot.pause()
        screen.toggle_bundle(bundles.arm64)  # built for arm64 only: the x86 agents refuse it
        await pilot.pause()
        targets = screen.query_one(TargetList)
        lines = _lines(targets)
        kitchen = next(line for line in lines if "kitchen-pi" in line)
        x86 = next(line for line in lines if "edge-x86-a" in line)
        line9 = next(line for line in lines if "line-9" in line)
        assert "[x]" in kitchen and "[-]" in x86 and "[ ]" in line9
        # the refusal is wrapped onto the lines below the agent, every word of it on screen
        words = " ".join(lines).split()
        assert all(w in words for w in ["build", "it", "with", "`edge-pack", "build", "--profile"])
        assert "x86_64-cpu-openvino`" in words

        # c marks the highlighted target as the canary, ticking it
        index = screen._target_keys.index("10.0.0.9:50051")
        targets.focus()
        targets.highlighted = index
        await pilot.press("c")
        assert screen.canary == "10.0.0.9:50051" and "10.0.0.9:50051" in targets.selected
        assert any("line-9" in line and "◆ canary" in line for line in _lines(targets))
        assert "line-9" in str(screen.query_one("#canary-name").render())
        # a refused target cannot be the canary
        targets.highlighted = screen._target_keys.index("id-edge-x86-a")
        await pilot.press("c")
        assert screen.canary == "10.0.0.9:50051"


async def test_the_last_bundle_folder_is_remembered(bundles: BundleSet, tmp_path: Path) -> None:
    state = tmp_path / "config-dir"
    for _ in range(2):
        app = _app(state_dir=state)
        async with app.run_test(size=(120, 36)) as pilot:
            _fill_fleet(app)
            screen = DeployScreen()
            await app.push_screen(screen)
            await pilot.pause()
            tree_root = Path(screen.query_one("#bundle-tree").path)  # type: ignore[attr-defined]
            screen.toggle_bundle(bundles.mlp[2])
    assert tree_root.resolve() == bundles.mlp[2].parent.resolve()  # the second opening
    assert (state / "last_bundle_dir").read_text().strip() == str(bundles.mlp[2].parent.resolve())


def _corrupt(bundle: Path, out: Path) -> Path:
    """A copy of ``bundle`` whose model file has one byte changed (same size, same manifest)."""
    with tarfile.open(bundle) as src, tarfile.open(out, "w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
            if member.name.endswith(".onnx"):
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            dst.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return out


async def test_a_corrupt_bundle_is_refused_before_any_upload(
        agents: Callable[..., RunningAgent], bundles: BundleSet, tmp_path: Path) -> None:
    alpha = agents("alpha", mdns=False)
    bad = _corrupt(bundles.mlp[1], tmp_path / bundles.mlp[1].name)
    app = _app_for(alpha)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: app.fleet.agents()[0].answered, "alpha answered")
        app.open_deploy([app.fleet.agents()[0].key])
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DeployScreen)
        screen.toggle_bundle(bad)  # its structure is fine: it can be picked
        assert [b.path for b in screen.bundles] == [bad]
        await pilot.press("ctrl+s", "y")
        await wait_for(pilot, lambda: screen.outcome is not None, "the rollout to end", 60)
        assert screen.outcome is not None and not screen.outcome.ok
        assert "does not match its manifest sha256" in screen.outcome.message
        assert str(bad) in screen.outcome.message
    with AgentClient(alpha.address, token=alpha.token) as c:  # nothing reached the agent
        assert await asyncio.to_thread(c.deployments) == []
        assert await asyncio.to_thread(c.models) == []


def test_settings_without_a_config_dir_remember_nothing() -> None:
    assert ConsoleSettings().state_dir is None
    assert StaticAgent("127.0.0.1", 1).address == "127.0.0.1:1"
