"""The agent and history screens against a real agent serving real requests; keyboard habits
(jump, events, remove with confirmation, read-only, command palette entries)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc as triton
from textual.widgets import DataTable, RichLog, TabbedContent

from console.config import StaticAgent
from console.fleet import AgentState
from console.screens.agent import AgentScreen
from console.screens.agent_log import AgentLogScreen
from console.screens.confirm import ConfirmScreen
from console.screens.doctor import DoctorScreen
from console.screens.events import EventsScreen
from console.screens.fleet import FleetScreen
from console.screens.history import HistoryScreen
from console.widgets.metric_plots import TimePlot
from edge_agent.client.agent_client import AgentClient
from tests.console_tui.agents import BundleSet, RunningAgent
from tests.console_tui.conftest import console_app, wait_for


def _traffic(address: str, stop: threading.Event) -> None:
    """Real KServe v2 requests to model mlp until ``stop`` is set."""
    client = triton.InferenceServerClient(url=address)
    x = np.random.default_rng(0).random((2, 64), dtype=np.float32)
    inp = triton.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    while not stop.is_set():
        client.infer("mlp", [inp])
        stop.wait(0.01)
    client.close()


def _static(agent: RunningAgent) -> StaticAgent:
    return StaticAgent("127.0.0.1", int(agent.address.rsplit(":")[1]), agent.name)


async def test_agent_screen_live_metrics_history_and_remove(
        agents: Callable[..., RunningAgent], bundles: BundleSet) -> None:
    alpha = agents("alpha", mdns=False)
    with AgentClient(alpha.address, token=alpha.token) as c:
        assert c.deploy(bundles.mlp[1]).ok and c.deploy(bundles.mlp[2]).ok
        inference = c.info().inference_address
    stop = threading.Event()
    traffic = threading.Thread(target=_traffic, args=(inference, stop), daemon=True)
    traffic.start()
    try:
        app = console_app(discovery=False, tokens={alpha.address: alpha.token},
                          agents=(_static(alpha),))
        async with app.run_test(size=(150, 45)) as pilot:
            await wait_for(pilot, lambda: app.fleet.find("alpha").state is AgentState.ONLINE,
                           "alpha online")
            await pilot.press("colon", *"agent alpha", "enter")  # `:` jump
            screen = app.screen
            assert isinstance(screen, AgentScreen)
            await wait_for(pilot, lambda: screen.snapshot.active_version("mlp") == 2,
                           "versions listed")
            await wait_for(pilot, lambda: "mlp" in screen.metrics.series and
                           max(screen.metrics.series["mlp"].rps) > 0,
                           "live throughput of mlp from WatchMetrics")
            await wait_for(pilot, lambda: "mlp" in screen._plots, "the mlp plot")
            await wait_for(pilot, lambda: any(
                p.drawn for p in screen._plots["mlp"].query(TimePlot)), "the mlp plot drawn")
            assert screen.metrics.system is not None
            assert "CPU" in str(screen.query_one("#agent-system").render())

            await pilot.press("e")
            assert screen.query_one(TabbedContent).active == "tab-events"
            assert screen.query_one("#agent-events", DataTable).row_count > 0

            # the agent's own log (the agent process logged its start-up)
            await pilot.press("l")
            log_screen = app.screen
            assert isinstance(log_screen, AgentLogScreen)
            await wait_for(pilot, lambda: log_screen.shown > 0, "the agent's log lines")
            assert log_screen.query_one(RichLog).lines
            await pilot.press("escape")
            # the device checks, run by the agent
            await pilot.press("c")
            doctor = app.screen
            assert isinstance(doctor, DoctorScreen)
            await wait_for(pilot, lambda: doctor.report is not None, "the doctor's report")
            assert doctor.report is not None
            assert any(f.check == "architecture" for f in doctor.report.findings)
            assert doctor.query_one(DataTable).row_count == len(doctor.report.findings)
            await pilot.press("escape")
            assert app.screen is screen

            # remove v1 (inactive): confirmation first, then it is gone from the agent
            table = screen.query_one("#models-table", DataTable)
            table.focus()
            table.move_cursor(row=1)  # rows: mlp 2 (active), mlp 1
            assert screen.selected_version() == ("mlp", 1)
            await pilot.press("x")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("n")  # cancelled: nothing happens
            assert isinstance(app.screen, AgentScreen)
            await pilot.press("x", "y")
            await wait_for(pilot, lambda: [v.version for v in screen.snapshot.versions]
                           == [2], "v1 removed", 60)

            await pilot.press("h")
            history = app.screen
            assert isinstance(history, HistoryScreen)
            await wait_for(pilot, lambda: sum(p.requests for p in history.points) > 0,
                           "past requests from QueryMetrics", 60)
            rows = history.query_one("#history-table", DataTable).row_count
            assert rows == len(history.points) > 0
    finally:
        stop.set()
        await asyncio.to_thread(traffic.join, 10)


@pytest.mark.parametrize("read_only", [False, True])
async def test_read_only_hides_changes_and_the_palette_lists_every_action(
        agents: Callable[..., RunningAgent], bundles: BundleSet, read_only: bool) -> None:
    alpha = agents("alpha", mdns=False)
    with AgentClient(alpha.address, token=alpha.token) as c:
        assert c.deploy(bundles.mlp[1]).ok
    app = console_app(discovery=False, tokens={alpha.address: alpha.token},
                      agents=(_static(alpha),), read_only=read_only)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: app.fleet.find("alpha").state is AgentState.ONLINE,
                       "alpha online")
        assert isinstance(app.screen, FleetScreen)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Filter", "Details", "Sort", "Open", "History", "Help", "Jump",
                "Events"} <= titles
        assert ("Deploy" in titles) is not read_only
        await pilot.press("D")
        assert (type(app.screen).__name__ == "DeployScreen") is not read_only
        if not read_only:
            await pilot.press("escape")
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, AgentScreen)
        titles = {c.title for c in app.get_system_commands(screen)}
        assert ({"Rollback", "Activate", "Remove"} <= titles) is not read_only
        await wait_for(pilot, lambda: screen.snapshot.models() == ["mlp"], "the agent answered")
        await pilot.press("r")
        assert (type(app.screen).__name__ == "RollbackScreen") is not read_only
        if not read_only:
            await pilot.press("escape")
        await pilot.press("escape", "e")
        assert isinstance(app.screen, EventsScreen)
