"""A rollout runs in the background (the app owns it): the deploy view can be left, the
header shows its progress, other agents can be browsed, and the rollouts view lists it with its
per-target steps and cancels it (real agents, real bundles)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from textual.widgets import DataTable, SelectionList

from console.fleet import AgentState
from console.rollout.staged import Phase
from console.screens.agent import AgentScreen
from console.screens.confirm import ConfirmScreen
from console.screens.deploy import DeployScreen
from console.screens.fleet import FleetScreen
from console.screens.rollouts import RolloutsScreen
from tests.console_tui.agents import BundleSet, RunningAgent
from tests.console_tui.conftest import wait_for
from tests.console_tui.test_deploy_live import _active, _app_for, _two_agents_on_v1


async def test_a_rollout_runs_on_while_the_operator_browses_and_is_cancelled_from_the_list(
        agents: Callable[..., RunningAgent], bundles: BundleSet) -> None:
    alpha, beta = _two_agents_on_v1(agents, bundles)
    app = _app_for(alpha, beta)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: all(a.state is AgentState.ONLINE
                                          for a in app.fleet.agents()), "both online")
        alpha_key, beta_key = app.fleet.find("alpha").key, app.fleet.find("beta").key  # type: ignore[union-attr]
        app.open_deploy([alpha_key, beta_key])
        await pilot.pause()
        deploy = app.screen
        assert isinstance(deploy, DeployScreen)
        deploy.toggle_bundle(bundles.mlp[2])
        targets = deploy.query_one("#target-list", SelectionList)
        await wait_for(pilot, lambda: len(targets.selected) == 2, "both targets ticked")
        deploy.canary = alpha_key
        deploy.query_one("#soak-input").value = "120"
        await pilot.press("ctrl+s", "y")
        job = app.rollouts.jobs[0]
        await wait_for(pilot, lambda: job.targets[alpha_key].phase is Phase.SOAKING,
                       "the canary under watch", 60)

        await pilot.press("escape")  # leaving the deploy view does not stop the rollout
        assert isinstance(app.screen, FleetScreen)
        assert job.running and "rollout #1 running 0/2" in app.title
        await pilot.press("colon", *"agent beta", "enter")  # browse another agent meanwhile
        assert isinstance(app.screen, AgentScreen)
        await wait_for(pilot, lambda: app.screen.snapshot.models() == ["mlp"],  # type: ignore[attr-defined]
                       "beta's view answers while the rollout runs")
        assert job.running

        await pilot.press("R")
        view = app.screen
        assert isinstance(view, RolloutsScreen)
        assert view.query_one("#rollouts-table", DataTable).row_count == 1
        steps = view.query_one("#rollout-steps", DataTable)
        rows = [[str(c) for c in steps.get_row_at(r)] for r in range(steps.row_count)]
        assert rows[0][:2] == ["alpha (canary)", "soaking"]
        assert any(r[2] == "committed" for r in rows)  # the canary's own steps are listed
        assert ["beta", "waiting"] in [r[:2] for r in rows]
        committed = next(r for r in rows if r[2] == "committed")
        assert committed[4] not in ("", "-", "00:00:00")  # stamped when it arrived (issue 28)
        assert committed[5].startswith("+")  # and how long after the start

        await pilot.press("q")  # issue 28: q with a canary under watch warns, does not quit
        assert isinstance(app.screen, ConfirmScreen)
        assert "Quit with a rollout running" in app.screen.title_text
        assert "canary alpha under watch" in app.screen.question
        await pilot.press("n")
        assert app.screen is view and job.running

        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: not job.running, "the rollout to stop", 60)
        assert job.outcome is not None and "cancelled" in job.outcome.message
        assert {p.name: p.phase for p in job.targets.values()} == {
            "alpha": Phase.ROLLED_BACK, "beta": Phase.SKIPPED}
        assert app.title == "edge-console"  # nothing runs: the header is plain again
        await pilot.pause()
        assert "failed: " in str(view.query_one("#rollouts-table", DataTable).get_row_at(0)[6])
        assert [await asyncio.to_thread(_active, a) for a in (alpha, beta)] == [1, 1]
