"""The agent view's plots start from the agent's stored history (QueryMetrics), switch range
with ``t``, and the history screen draws the same plots (a real agent, real traffic)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from console.fleet import AgentState
from console.screens.agent import AgentScreen
from console.screens.history import HistoryScreen
from console.widgets.fleet_table import FleetTable
from console.widgets.metric_plots import ModelPlots, TimePlot
from edge_agent.client.agent_client import AgentClient
from tests.console_tui.agents import BundleSet, RunningAgent
from tests.console_tui.conftest import console_app, wait_for
from tests.console_tui.test_agent_live import _static, _traffic
from tests.support.eventually import eventually_async


def _stored_requests(address: str, token: str) -> int:
    with AgentClient(address, token=token) as c:
        return sum(p.requests for p in c.query_metrics("mlp", start=time.time() - 300,
                                                       end=time.time(), step_s=2))


async def test_plots_are_backfilled_from_history_then_switch_range(
        agents: Callable[..., RunningAgent], bundles: BundleSet) -> None:
    alpha = agents("alpha", mdns=False)
    with AgentClient(alpha.address, token=alpha.token) as c:
        assert c.deploy(bundles.mlp[1]).ok
        inference = c.info().inference_address
    stop = threading.Event()
    traffic = threading.Thread(target=_traffic, args=(inference, stop), daemon=True)
    traffic.start()
    try:  # traffic until the agent's SQLite history holds some of it, then no more
        await eventually_async(lambda: _stored_requests(alpha.address, alpha.token),
                               timeout=60, interval=0.5,
                               message="the agent never stored its metrics")
    finally:
        stop.set()
        await asyncio.to_thread(traffic.join, 10)

    app = console_app(discovery=False, tokens={alpha.address: alpha.token},
                      agents=(_static(alpha),))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.fleet.find("alpha").state  # type: ignore[union-attr]
                       is AgentState.ONLINE,
                       "alpha online")
        # the fleet row has the agent's own rate sparkline (QueryMetrics of its active models)
        table = app.screen.query_one(FleetTable)

        def row() -> list[str]:
            return [str(c) for c in table.get_row_at(0)] if table.row_count else ["", ""] * 2

        await wait_for(pilot, lambda: any(ch in row()[2] for ch in "▂▃▄▅▆▇█"),
                       "alpha's request-rate sparkline in the fleet table")
        assert any(app.fleet.find("alpha").rates)  # type: ignore[union-attr]
        assert row()[3].startswith("▁")  # no errors
        await pilot.press("colon", *"agent alpha", "enter")
        screen = app.screen
        assert isinstance(screen, AgentScreen)
        assert screen.plot_data.range.label == "5 min"

        def backfilled() -> bool:
            data = screen.plot_data
            past = [v for ts, v in data.model_series("mlp")["rps"] if ts < data.history_until]
            return data.history_loaded and bool(past) and max(past) > 0

        await wait_for(pilot, backfilled, "past requests in the plot from QueryMetrics")
        await wait_for(pilot, lambda: "mlp" in screen._plots and any(
            p.drawn for p in screen._plots["mlp"].query(TimePlot)), "the mlp plot drawn")
        p95 = [v for _, v in screen.plot_data.model_series("mlp")["p95"]]
        assert p95 and max(p95) > 0  # latency from the history too, not only the rate
        # the device plots start from the agent's stored system samples (QuerySystemMetrics)
        past_cpu = [ts for ts, _ in screen.plot_data.device_series()["cpu"]
                    if ts < screen.plot_data.history_until - 2]
        assert past_cpu, "no stored device samples in the device plot"

        await pilot.press("t")  # 5 min -> 1 h: the history of the new range is asked for
        assert screen.plot_data.range.label == "1 h"
        assert "[b]1 h[/b]" in str(screen._range_line())
        await wait_for(pilot, backfilled, "the 1 h history")
        assert screen.plot_data.range.step_s == 15

        await pilot.press("h")
        history = app.screen
        assert isinstance(history, HistoryScreen)
        await wait_for(pilot, lambda: bool(history.query(ModelPlots)) and any(
            p.drawn for p in history.query_one(ModelPlots).query(TimePlot)),
            "the history screen's plots", 60)
        assert sum(p.requests for p in history.points) > 0
