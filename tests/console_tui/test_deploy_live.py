"""Deploy, roll back and watch real agents from the TUI (real gRPC, real bundles)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

import numpy as np
import tritonclient.grpc as triton
from textual.widgets import DataTable, SelectionList
from tritonclient.utils import InferenceServerException

from console.app import EdgeConsoleApp
from console.config import StaticAgent
from console.fleet import AgentState
from console.rollout.staged import Phase
from console.screens.agent import AgentScreen
from console.screens.confirm import ConfirmScreen
from console.screens.deploy import DeployScreen
from console.screens.rollback import RollbackScreen
from console.widgets.bundle_tree import BundleTree
from edge_agent.client.agent_client import AgentClient
from tests.console_tui.agents import BundleSet, RunningAgent
from tests.console_tui.conftest import console_app, wait_for


def _active(agent: RunningAgent, model: str = "mlp") -> int | None:
    with AgentClient(agent.address, token=agent.token) as c:
        return next((v.version for v in c.models(model) if v.active), None)


def _two_agents_on_v1(agents: Callable[..., RunningAgent],
                      bundles: BundleSet) -> tuple[RunningAgent, RunningAgent]:
    """Agents ``alpha`` and ``beta`` (no mDNS), each serving mlp version 1."""
    alpha, beta = agents("alpha", mdns=False), agents("beta", mdns=False)
    for a in (alpha, beta):
        with AgentClient(a.address, token=a.token) as c:
            assert c.deploy(bundles.mlp[1]).ok
    return alpha, beta


def _app_for(*running: RunningAgent, tokens: dict[str, str] | None = None,
             **settings: object) -> EdgeConsoleApp:
    """The console app listing ``running`` (static addresses, their tokens, no discovery)."""
    return console_app(
        discovery=False, tokens=tokens or {a.address: a.token for a in running},
        agents=tuple(StaticAgent("127.0.0.1", int(a.address.rsplit(":")[1]), a.name)
                     for a in running), **settings)


async def _pick_bundle(pilot, screen: DeployScreen, name: str) -> None:  # type: ignore[no-untyped-def]
    tree = screen.query_one(BundleTree)
    await wait_for(pilot, lambda: any(str(n.data.path).endswith(name) for n in
                                      tree.root.children if n.data), f"{name} listed")
    line = next(i for i, n in enumerate(tree.root.children) if str(n.data.path).endswith(name))
    tree.focus()
    tree.cursor_line = line + 1  # the root is line 0
    await pilot.press("enter")
    await wait_for(pilot, lambda: any(b.path.name == name for b in screen.bundles),
                   f"{name} picked")


async def test_deploy_with_canary_then_roll_back(agents: Callable[..., RunningAgent],
                                                 bundles: BundleSet) -> None:
    alpha, beta = _two_agents_on_v1(agents, bundles)
    app = _app_for(alpha, beta, bundle_dir=bundles.mlp[1].parent,
                   tokens={"alpha": alpha.token, "beta": beta.token,
                           alpha.address: alpha.token, beta.address: beta.token})
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: all(a.state is AgentState.ONLINE and a.models == ("mlp:1",)
                                          for a in app.fleet.agents()), "both online on v1")
        await pilot.press("D")
        screen = app.screen
        assert isinstance(screen, DeployScreen)
        await _pick_bundle(pilot, screen, bundles.mlp[2].name)
        await _pick_bundle(pilot, screen, bundles.arm64.name)
        targets = screen.query_one("#target-list", SelectionList)
        await wait_for(pilot, lambda: targets.option_count == 2, "two targets listed")
        targets.select_all()
        await pilot.pause()
        screen.query_one("#soak-input").value = "1"
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: screen.outcome is not None, "the rollout to end", 90)
        outcome = screen.outcome
        assert outcome is not None and outcome.ok, outcome.message
        phases = {p.name: p.phase for p in outcome.targets.values()}
        assert phases == {"alpha": Phase.DONE, "beta": Phase.DONE}
        assert sum(p.canary for p in outcome.targets.values()) == 1
        assert all(p.bundles == (bundles.mlp[2].name,) for p in outcome.targets.values())
        assert all(p.sent == p.total > 0 for p in outcome.targets.values())
        steps = screen.query_one("#steps-table", DataTable)
        assert steps.row_count >= 2 * 5
        assert [await asyncio.to_thread(_active, a) for a in (alpha, beta)] == [2, 2]
        await wait_for(pilot, lambda: all(a.models == ("mlp:2",) for a in app.fleet.agents()),
                       "the fleet shows v2 active")

        # roll alpha back from its agent screen: previous version by default, confirmed
        await pilot.press("escape")
        app.open_agent(app.fleet.find("alpha").key)
        await pilot.pause()
        agent_screen = app.screen
        assert isinstance(agent_screen, AgentScreen)
        await wait_for(pilot, lambda: agent_screen.snapshot.active_version("mlp") == 2,
                       "the agent screen shows v2 active")
        models = agent_screen.query_one("#models-table", DataTable)
        assert models.row_count == 2
        await pilot.press("r")
        modal = app.screen
        assert isinstance(modal, RollbackScreen) and modal.default == 1
        await pilot.press("y")
        await wait_for(pilot, lambda: agent_screen.snapshot.active_version("mlp") == 1,
                       "v1 active again on alpha", 60)
        assert await asyncio.to_thread(_active, alpha) == 1
        assert await asyncio.to_thread(_active, beta) == 2
        assert agent_screen.snapshot.deployments[0].kind == "rollback"
        assert any("roll back mlp to v1" in e.text for e in app.fleet.events)


async def test_a_failing_canary_stops_the_rollout(agents: Callable[..., RunningAgent],
                                                  bundles: BundleSet) -> None:
    alpha, beta = _two_agents_on_v1(agents, bundles)
    app = _app_for(alpha, beta)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: all(a.state is AgentState.ONLINE
                                          for a in app.fleet.agents()), "both online")
        app.open_deploy([app.fleet.find("alpha").key, app.fleet.find("beta").key])
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DeployScreen)
        screen.toggle_bundle(bundles.nan)  # fits, signed: fails only at the health probe
        await pilot.pause()
        targets = screen.query_one("#target-list", SelectionList)
        await wait_for(pilot, lambda: len(targets.selected) == 2, "both targets ticked")
        screen.canary = app.fleet.find("beta").key
        await pilot.press("ctrl+s", "y")
        await wait_for(pilot, lambda: screen.outcome is not None, "the rollout to end", 90)
        outcome = screen.outcome
        assert outcome is not None and not outcome.ok
        phases = {p.name: p.phase for p in outcome.targets.values()}
        assert phases == {"beta": Phase.FAILED, "alpha": Phase.SKIPPED}
        assert "canary beta failed" in outcome.message and "nothing else" in outcome.message
        assert "NaN" in outcome.targets[app.fleet.find("beta").key].message
        assert [await asyncio.to_thread(_active, a) for a in (alpha, beta)] == [1, 1]


async def test_a_bundle_the_agents_would_refuse_is_refused_before_upload(
        agents: Callable[..., RunningAgent], bundles: BundleSet) -> None:
    alpha, beta = _two_agents_on_v1(agents, bundles)
    app = _app_for(alpha, beta)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: all(a.state is AgentState.ONLINE
                                          for a in app.fleet.agents()), "both online")
        app.open_deploy([app.fleet.find("alpha").key, app.fleet.find("beta").key])
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DeployScreen)
        screen.toggle_bundle(bundles.unsigned)  # the agents trust only signed bundles
        await pilot.pause()
        targets = screen.query_one("#target-list", SelectionList)
        await wait_for(pilot, lambda: len(targets.selected) == 2, "both targets ticked")
        await pilot.press("ctrl+s", "y")
        await wait_for(pilot, lambda: screen.outcome is not None, "the rollout to end", 90)
        outcome = screen.outcome
        assert outcome is not None and not outcome.ok
        for progress in outcome.targets.values():
            assert progress.phase is Phase.REFUSED and progress.sent == 0
            assert "refused before the upload" in progress.message
            assert "--allow-unsigned" in progress.message
        assert [await asyncio.to_thread(_active, a) for a in (alpha, beta)] == [1, 1]


async def test_bundles_for_another_profile_are_refused_before_upload(
        agents: Callable[..., RunningAgent], bundles: BundleSet) -> None:
    alpha = agents("alpha", mdns=False)
    app = _app_for(alpha)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: app.fleet.find("alpha").state is AgentState.ONLINE,
                       "alpha online")
        key = app.fleet.find("alpha").key
        app.open_deploy([key])
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DeployScreen)
        screen.toggle_bundle(bundles.arm64)
        await pilot.pause()
        targets = screen.query_one("#target-list", SelectionList)
        assert targets.selected == []  # refused targets are not ticked
        label = str(targets.get_option_at_index(0).prompt)
        assert "refused" in label and "arm64-cpu-onnxruntime" in label
        assert targets.get_option_at_index(0).disabled  # and cannot be ticked
        targets.select_all()
        await pilot.pause()
        assert targets.selected == []
        await pilot.press("ctrl+s")  # nothing to deploy to: said, and no rollout starts
        await pilot.pause()
        assert not screen.running and screen.outcome is None
        with AgentClient(alpha.address, token=alpha.token) as c:
            assert c.deployments() == []  # nothing was uploaded


def _bad_traffic(address: str, stop: threading.Event) -> None:
    """Requests holding 25.0: fine for the MLP, an error for the fragile version."""
    client = triton.InferenceServerClient(url=address)
    x = np.full((1, 64), 25.0, np.float32)
    inp = triton.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    while not stop.is_set():
        with contextlib.suppress(InferenceServerException):
            client.infer("mlp", [inp])
        stop.wait(0.01)
    client.close()


async def test_a_canary_that_turns_unhealthy_is_rolled_back(
        agents: Callable[..., RunningAgent], bundles: BundleSet) -> None:
    alpha, beta = _two_agents_on_v1(agents, bundles)
    with AgentClient(alpha.address, token=alpha.token) as c:
        inference = c.info().inference_address
    stop = threading.Event()
    traffic = threading.Thread(target=_bad_traffic, args=(inference, stop), daemon=True)
    traffic.start()
    try:
        app = _app_for(alpha, beta)
        async with app.run_test(size=(150, 45)) as pilot:
            await wait_for(pilot, lambda: all(a.state is AgentState.ONLINE
                                              for a in app.fleet.agents()), "both online")
            app.open_deploy([app.fleet.find("alpha").key, app.fleet.find("beta").key])
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, DeployScreen)
            screen.toggle_bundle(bundles.fragile)
            targets = screen.query_one("#target-list", SelectionList)
            await wait_for(pilot, lambda: len(targets.selected) == 2, "both targets ticked")
            screen.canary = app.fleet.find("alpha").key
            screen.query_one("#soak-input").value = "20"
            await pilot.press("ctrl+s", "y")
            await wait_for(pilot, lambda: screen.outcome is not None, "the rollout to end", 90)
            outcome = screen.outcome
            assert outcome is not None and not outcome.ok
            phases = {p.name: p.phase for p in outcome.targets.values()}
            assert phases == {"alpha": Phase.ROLLED_BACK, "beta": Phase.SKIPPED}
            assert "turned unhealthy" in outcome.message, outcome.message
            assert [await asyncio.to_thread(_active, a) for a in (alpha, beta)] == [1, 1]
            with AgentClient(beta.address, token=beta.token) as c:
                assert len(c.deployments()) == 1  # only the setup deploy: beta untouched
    finally:
        stop.set()
        await asyncio.to_thread(traffic.join, 10)


async def test_cancelling_during_the_canary_watch_rolls_it_back(
        agents: Callable[..., RunningAgent], bundles: BundleSet) -> None:
    alpha, beta = _two_agents_on_v1(agents, bundles)
    app = _app_for(alpha, beta)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: all(a.state is AgentState.ONLINE
                                          for a in app.fleet.agents()), "both online")
        alpha_key = app.fleet.find("alpha").key
        app.open_deploy([alpha_key, app.fleet.find("beta").key])
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DeployScreen)
        screen.toggle_bundle(bundles.mlp[2])
        targets = screen.query_one("#target-list", SelectionList)
        await wait_for(pilot, lambda: len(targets.selected) == 2, "both targets ticked")
        screen.canary = alpha_key
        screen.query_one("#soak-input").value = "120"
        await pilot.press("ctrl+s", "y")
        await wait_for(pilot, lambda: screen.rows[alpha_key].progress.phase is Phase.SOAKING,
                       "the canary under watch", 60)
        assert await asyncio.to_thread(_active, alpha) == 2
        await pilot.press("ctrl+x")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: screen.outcome is not None, "the rollout to stop", 60)
        outcome = screen.outcome
        assert outcome is not None and not outcome.ok and "cancelled" in outcome.message
        phases = {p.name: p.phase for p in outcome.targets.values()}
        assert phases == {"alpha": Phase.ROLLED_BACK, "beta": Phase.SKIPPED}
        assert [await asyncio.to_thread(_active, a) for a in (alpha, beta)] == [1, 1]
