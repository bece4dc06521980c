"""Every size: at 80x24 the agent view shows its plots as one summary line and the deploy
screen keeps its Start button on screen; at 160x45 the full layout shows (Pilot, no network)."""

from __future__ import annotations

import pytest
from textual.widgets import Button, Footer

from console.app import EdgeConsoleApp
from console.screens.agent import AgentScreen
from console.screens.deploy import DeployScreen
from tests.console_tui.test_snapshots import _agent_setup, _app, _fill_fleet


@pytest.mark.parametrize(("size", "compact"), [((80, 24), True), ((160, 45), False)])
async def test_agent_screen_fits_the_terminal(size: tuple[int, int], compact: bool) -> None:
    app = _app()
    async with app.run_test(size=size) as pilot:
        await _agent_setup(pilot)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AgentScreen) and screen.compact is compact
        assert screen.query_one("#plots").display is not compact
        summary = screen.query_one("#plot-summary")
        assert summary.display is compact
        if compact:
            assert "mlp" in str(summary.render()) and "req/s" in str(summary.render())
        table = screen.query_one("#models-table")
        assert table.region.right <= size[0]  # the model table is never cut off the screen
        assert screen.query_one(Footer).compact is compact


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_deploy_start_button_stays_on_screen(size: tuple[int, int], tmp_path) -> None:  # type: ignore[no-untyped-def]
    app: EdgeConsoleApp = _app()
    async with app.run_test(size=size) as pilot:
        _fill_fleet(app)  # four agents in the target list
        screen = DeployScreen(["id-kitchen-pi"], root=tmp_path)
        await app.push_screen(screen)
        await pilot.pause()
        button = screen.query_one("#start", Button)
        region = button.region
        pane = screen.query_one("#deploy-pick").region  # the button is not clipped by its pane
        assert region.height == 3 and region.bottom <= pane.bottom <= size[1] - 1
