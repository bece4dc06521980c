"""Issue 18 "wrong data": what the console shows must be what is true now.

Pilot tests on fixed data and a fixed clock (no network): idle seconds are zeros and errors are
shown; an mDNS goodbye is stamped with the console's clock and events stay in time order; data
from an agent that cannot be asked is dimmed and labelled with its age; a failed canary shows
no full bar; a refused target cannot be ticked and the confirmation names it.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from rich.text import Text
from textual.widgets import DataTable, Label, ProgressBar, SelectionList, Static

from console.app import EdgeConsoleApp
from console.config import ConsoleSettings
from console.discovery import DiscoveredAgent, DiscoveryEvent
from console.fleet import AgentState, Fleet, ProbeResult
from console.messages import MetricsArrived
from console.rollout.staged import Phase, TargetProgress
from console.screens.agent import AgentScreen
from console.screens.confirm import ConfirmScreen
from console.screens.deploy import DeployScreen
from console.widgets.metric_plots import ModelPlots
from console.widgets.target_row import TargetRow
from edge_agent.client.types import AgentInfo, MetricPoint, MetricsSample, VersionInfo
from tests.console_tui.agents import BundleSet

NOW = 1_800_000_000.0
SIZE = (130, 40)


class Clock:
    """A console clock the test moves by hand."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _app(clock: Clock) -> EdgeConsoleApp:
    return EdgeConsoleApp(ConsoleSettings(discovery=False), clock=clock, poll=False)


def _found(name: str, profile: str = "x86_64-cpu-onnxruntime", arch: str = "x86_64",
           last_seen: float = NOW) -> DiscoveredAgent:
    return DiscoveredAgent(id=f"id-{name}", name=name, host="127.0.0.1",
                           port=50000 + len(name), arch=arch, profile=profile, api="1",
                           grpc_port=8001, txt={}, addresses=("127.0.0.1",),
                           last_seen=last_seen)


def _sample(ts: int, *points: tuple[str, float, int]) -> MetricsSample:
    return MetricsSample(ts=ts, points=tuple(
        MetricPoint(ts=ts, step_s=1, model=model, version=1, requests=int(rps), errors=errors,
                    requests_per_s=rps, error_rate=errors / max(rps, 1), mean_batch=1.0,
                    p50_ms=1.0, p95_ms=2.0, p99_ms=3.0, queue_p99_ms=0.1)
        for model, rps, errors in points), system=None)


def _headline(plot: ModelPlots) -> str:
    return str(plot.query_one(".plot-title", Label).render())


async def test_live_metrics_fall_to_zero_when_traffic_stops_and_show_errors() -> None:
    app = _app(Clock())
    async with app.run_test(size=SIZE) as pilot:
        app.fleet.apply_discovery(DiscoveryEvent("added", _found("alpha")))
        screen = AgentScreen("id-alpha", live=False)
        await app.push_screen(screen)
        for t in range(5):
            screen.add_sample(_sample(int(NOW) + t, ("mlp", 64.0, 3 if t == 4 else 0)))
        await pilot.pause()
        plot = screen.query_one(ModelPlots)
        assert "64.0 req/s" in _headline(plot)
        assert "3.0 err/s" in _headline(plot)  # errors are on screen, not only collected
        # load ends: the agent's samples carry no point for the model any more
        for t in range(5, 8):
            screen.add_sample(_sample(int(NOW) + t))
        await pilot.pause()
        assert list(screen.metrics.series["mlp"].rps)[-3:] == [0.0, 0.0, 0.0]
        assert "0.0 req/s" in _headline(plot) and "64" not in _headline(plot)
        assert "p95 -" in _headline(plot)  # no requests: no latency to show
        assert "0.0 err/s" in _headline(plot)
        rates = [v for _, v in screen.plot_data.model_series("mlp")["rps"]]
        assert rates[-1] == 0.0 and max(rates) > 0  # the plot falls to zero too


def test_a_goodbye_is_stamped_with_the_consoles_clock_and_events_stay_in_order() -> None:
    clock = Clock()
    fleet = Fleet(clock=clock)
    fleet.apply_discovery(DiscoveryEvent("added", _found("alpha", last_seen=NOW - 46)))
    clock.t = NOW + 0.5
    fleet.apply_discovery(DiscoveryEvent("removed", _found("alpha", last_seen=NOW - 46)))
    gone = fleet.get("id-alpha")
    assert gone is not None and gone.state is AgentState.OFFLINE
    assert gone.last_seen == NOW + 0.5  # "last seen now", not 46 s ago
    assert fleet.events[-1].at == NOW + 0.5 and fleet.events[-1].text == "went offline"
    clock.t = NOW - 10  # the wall clock stepped back (NTP): the log stays sorted
    fleet.log("alpha", "info", "late line")
    times = [e.at for e in fleet.events]
    assert times == sorted(times)


async def test_the_fleet_table_says_now_for_an_agent_that_just_left() -> None:
    clock = Clock()
    app = _app(clock)
    async with app.run_test(size=SIZE) as pilot:
        app.fleet.apply_discovery(DiscoveryEvent("added", _found("alpha", last_seen=NOW - 46)))
        clock.t = NOW + 0.5
        app.fleet.apply_discovery(DiscoveryEvent("removed", _found("alpha", last_seen=NOW - 46)))
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        row = [str(c) for c in table.get_row_at(0)]
        assert "now" in row and not any("46s" in c for c in row)


def _version(v: int, active: bool) -> VersionInfo:
    return VersionInfo(model="mlp", version=v, active=active, state="READY",
                       stored_state="ready", profile="x86_64-cpu-onnxruntime",
                       backend="onnxruntime", load_ms=4.0, rss_delta_bytes=0, load_error="",
                       size_bytes=7000, added_at=NOW - 3600)


async def test_data_from_an_agent_that_cannot_be_asked_is_dimmed_with_its_age() -> None:
    clock = Clock()
    app = _app(clock)
    async with app.run_test(size=SIZE) as pilot:
        app.fleet.apply_discovery(DiscoveryEvent("added", _found("alpha")))
        app.fleet.apply_probe("id-alpha", ProbeResult(AgentState.ONLINE))
        screen = AgentScreen("id-alpha", live=False)
        await app.push_screen(screen)
        info = AgentInfo(agent_id="id-alpha", name="alpha", host="alpha", arch="x86_64",
                         profile="x86_64-cpu-onnxruntime", runtimes=("onnxruntime",),
                         agent_version="0.1.0", uptime_s=60.0, api_version="1",
                         inference_address="127.0.0.1:8001", allow_unsigned=False,
                         keep_versions=3)
        snapshot_cls = screen.snapshot.__class__
        fresh_at = time.time()
        screen.show_snapshot(snapshot_cls(info=info, versions=(_version(1, True),),
                                          fetched_at=fresh_at))
        await pilot.pause()
        table = screen.query_one("#models-table", DataTable)
        live_cells = table.get_row_at(0)
        assert not any(isinstance(c, Text) and "dim" in str(c.style) for c in live_cells)
        assert "stale" not in str(screen.query_one("#agent-summary", Static).render())
        # the agent refuses the token now: the last data stays, dimmed and labelled
        screen.show_snapshot(snapshot_cls(info=info, versions=(_version(1, True),),
                                          error="refused the token",
                                          fetched_at=fresh_at - 90))
        await pilot.pause()
        summary = str(screen.query_one("#agent-summary", Static).render())
        assert "stale" in summary and "1m ago" in summary
        cells = table.get_row_at(0)
        assert all(isinstance(c, Text) and "dim" in str(c.style) for c in cells)
        # the live metrics stream broke: plots are marked stale too
        screen.add_sample(_sample(int(NOW), ("mlp", 5.0, 0)))
        await pilot.pause()
        screen.on_metrics_arrived(MetricsArrived("id-alpha", None, "connection refused"))
        await pilot.pause()
        assert screen.query_one("#plots").has_class("stale")
        assert "from now" in str(screen.query_one("#agent-system", Static).render())


async def test_a_failed_canary_row_shows_no_full_bar() -> None:
    app = _app(Clock())
    async with app.run_test(size=SIZE) as pilot:
        row = TargetRow(TargetProgress("k", "beta", canary=True, phase=Phase.DEPLOYING,
                                       sent=100, total=100))
        await app.screen.mount(row)
        await pilot.pause()
        assert row.query_one(ProgressBar).display
        row.show(TargetProgress("k", "beta", canary=True, phase=Phase.FAILED, sent=100,
                                total=100, message="the agent refused an unsigned bundle"))
        await pilot.pause()
        assert not row.query_one(ProgressBar).display
        assert "failed" in str(row.query_one(".target-state", Label).render())


@pytest.fixture
def bundle_dir(bundles: BundleSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(bundles.arm64, root / bundles.arm64.name)
    monkeypatch.chdir(tmp_path)
    return root


async def test_a_refused_target_cannot_be_ticked_and_the_confirmation_names_it(
        bundle_dir: Path, bundles: BundleSet) -> None:
    app = _app(Clock())
    async with app.run_test(size=SIZE) as pilot:
        app.fleet.apply_discovery(DiscoveryEvent("added", _found(
            "pi", profile="arm64-cpu-onnxruntime", arch="aarch64")))
        app.fleet.apply_discovery(DiscoveryEvent("added", _found("x86")))
        for key in ("id-pi", "id-x86"):
            app.fleet.apply_probe(key, ProbeResult(AgentState.ONLINE))
        screen = DeployScreen(["id-pi", "id-x86"], root=bundle_dir)
        await app.push_screen(screen)
        await pilot.pause()
        screen.toggle_bundle(bundle_dir / bundles.arm64.name)
        await pilot.pause()
        targets = screen.query_one("#target-list", SelectionList)
        assert targets.selected == ["id-pi"]  # the x86 agent was asked for but is refused
        assert targets.get_option("id-x86").disabled
        targets.focus()
        for key in ("down", "space", "up", "space", "space"):  # Space all over the list
            await pilot.press(key)
        assert "id-x86" not in targets.selected
        if "id-pi" not in targets.selected:
            targets.select("id-pi")
        await pilot.pause()
        screen.action_deploy()
        await pilot.pause()
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen)
        question = " ".join(str(w.render()) for w in confirm.query(Static))
        assert "refused" in question and "x86" in question
