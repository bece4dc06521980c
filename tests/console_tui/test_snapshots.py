"""Snapshot tests of the fleet, agent and deploy screens on fixed data and a fixed clock
(no network, no live values). Update with ``pytest tests/console_tui --snapshot-update``."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot

from console.app import EdgeConsoleApp
from console.config import ConsoleSettings, StaticAgent
from console.discovery import DiscoveredAgent, DiscoveryEvent
from console.fleet import AgentState, ProbeResult
from console.rollout.staged import Phase, RolloutOutcome, TargetProgress
from console.screens.agent import AgentScreen
from console.screens.deploy import DeployScreen
from console.widgets.bundle_tree import BundleTree
from console.widgets.target_list import TargetList
from edge_agent.client.types import (
    AgentInfo,
    DeploymentInfo,
    MetricPoint,
    MetricsSample,
    StepInfo,
    VersionInfo,
)
from tests.console_tui.agents import BundleSet

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
SIZE = (130, 36)


def _app(**kw: object) -> EdgeConsoleApp:
    settings = ConsoleSettings(discovery=False, agents=(StaticAgent("10.0.0.9", 50051,
                                                                    "line-9"),), **kw)  # type: ignore[arg-type]
    return EdgeConsoleApp(settings, clock=lambda: NOW, poll=False)


def _fill_fleet(app: EdgeConsoleApp) -> None:
    fleet = app.fleet
    rows = [("kitchen-pi", "arm64-cpu-onnxruntime", "aarch64", "1", "mlp:3,resnet:1", 5),
            ("jetson-01", "jetson-orin-tensorrt", "aarch64", "1", "detector:7", 40),
            ("edge-x86-a", "x86_64-cpu-openvino", "x86_64", "1", "mlp:3", 2),
            ("edge-x86-b", "x86_64-cpu-onnxruntime", "x86_64", "2", "", 1)]
    for i, (name, profile, arch, api, models, ago) in enumerate(rows, start=1):
        fleet.apply_discovery(DiscoveryEvent("added", DiscoveredAgent(
            id=f"id-{name}", name=name, host=f"192.168.1.{10 + i}", port=50051, arch=arch,
            profile=profile, api=api, grpc_port=8001, txt={"models": models},
            addresses=(f"192.168.1.{10 + i}",), last_seen=NOW - ago)))
    fleet.apply_probe("id-kitchen-pi", ProbeResult(
        AgentState.ONLINE, models=("mlp:3", "resnet:1"),
        rates=(0.0, 4.0, 12.5, 30.0, 61.0, 64.0, 58.0, 64.2, 20.0, 3.5),
        errors=(0.0,) * 7 + (0.5, 2.0, 0.0)))
    fleet.apply_probe("id-edge-x86-a", ProbeResult(
        AgentState.AUTH_FAILED, "agent 192.168.1.13:50051 refused GetInfo: missing or wrong "
        "management token"))
    fleet.apply_discovery(DiscoveryEvent("removed", DiscoveredAgent(
        id="id-jetson-01", name="jetson-01", host="192.168.1.12", port=50051, arch="aarch64",
        profile="jetson-orin-tensorrt", api="1", grpc_port=8001, txt={},
        last_seen=NOW - 600)))
    fleet.apply_probe("10.0.0.9:50051", ProbeResult(
        AgentState.UNREACHABLE, "cannot reach an agent at 10.0.0.9:50051: connection refused"))


def test_fleet_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def setup(pilot: Pilot[None]) -> None:
        _fill_fleet(pilot.app)  # type: ignore[arg-type]
        await pilot.pause()
        await pilot.press("down")

    assert snap_compare(_app(), terminal_size=SIZE, run_before=setup)


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
def test_fleet_screen_at_every_size(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    async def setup(pilot: Pilot[None]) -> None:
        _fill_fleet(pilot.app)  # type: ignore[arg-type]
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=size, run_before=setup)


def test_fleet_screen_read_only_filtered(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def setup(pilot: Pilot[None]) -> None:
        _fill_fleet(pilot.app)  # type: ignore[arg-type]
        await pilot.press("slash", *"aarch64", "enter")

    assert snap_compare(_app(read_only=True), terminal_size=SIZE, run_before=setup)


def _version(v: int, active: bool, state: str = "READY") -> VersionInfo:
    return VersionInfo(model="mlp", version=v, active=active, state=state,
                       stored_state="ready" if active else "unloaded",
                       profile="arm64-cpu-onnxruntime", backend="onnxruntime", load_ms=4.0 * v,
                       rss_delta_bytes=250_000, load_error="", size_bytes=7133 + v,
                       added_at=NOW - 3600 * (4 - v))


def _sample(t: int) -> MetricsSample:
    points = (MetricPoint(ts=int(NOW) + t, step_s=1, model="mlp", version=3,
                          requests=100 + 10 * (t % 7), errors=0,
                          requests_per_s=100.0 + 10 * (t % 7), error_rate=0.0, mean_batch=2.0,
                          p50_ms=1.0, p95_ms=2.0 + (t % 5) * 0.5, p99_ms=4.0,
                          queue_p99_ms=0.5),)
    return MetricsSample(ts=int(NOW) + t, points=points,
                         system={"cpu_percent": 37.0, "mem_percent": 41.0,
                                 "rss_bytes": 96.0 * 2**20, "disk_free_bytes": 12.5 * 2**30,
                                 "temp_c": 52.0})


async def _agent_setup(pilot: Pilot[None]) -> None:
    app: EdgeConsoleApp = pilot.app  # type: ignore[assignment]
    _fill_fleet(app)
    screen = AgentScreen("id-kitchen-pi", live=False)
    await app.push_screen(screen)
    steps = tuple(StepInfo(s, True, m, NOW - 1800 + i) for i, (s, m) in enumerate(
        [("received", "20480 bytes"), ("verified", "signed by key 4593"),
         ("probed", "one real inference ok"), ("committed", "version 3 is active")]))
    screen.show_snapshot(screen.snapshot.__class__(
        info=AgentInfo(agent_id="id-kitchen-pi", name="kitchen-pi", host="kitchen-pi",
                       arch="aarch64", profile="arm64-cpu-onnxruntime",
                       runtimes=("onnxruntime",), agent_version="0.1.0", uptime_s=7260.0,
                       api_version="1", inference_address="127.0.0.1:8001",
                       allow_unsigned=False, keep_versions=3),
        versions=(_version(3, True), _version(2, False, "UNLOADED"),
                  _version(1, False, "UNLOADED")),
        deployments=(DeploymentInfo(7, "mlp", "deploy", 2, 3, "committed", "committed", "",
                                    NOW - 1800, NOW - 1795, steps),
                     DeploymentInfo(6, "mlp", "rollback", 3, 2, "failed", "probed",
                                    "probe: NaN in output probs", NOW - 7200, NOW - 7190))))
    history = [_sample(t).points[0] for t in range(-240, 0, 2)]  # stored: QueryMetrics
    screen.add_history({"mlp": [replace(p, requests=2 * p.requests, step_s=2) for p in history]},
                       NOW)
    for t in range(60):
        screen.add_sample(_sample(t))
    await pilot.pause()



def test_agent_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_app(), terminal_size=SIZE, run_before=_agent_setup)


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
def test_agent_screen_at_every_size(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    """80x24 drops the plots to a summary line and keeps the model table's key columns."""
    assert snap_compare(_app(), terminal_size=size, run_before=_agent_setup)


@pytest.fixture
def bundle_dir(bundles: BundleSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "bundles"
    root.mkdir()
    for path in (bundles.mlp[2], bundles.arm64):
        shutil.copy(path, root / path.name)
    (root / "notes.txt").write_text("not a bundle: hidden by the picker\n")
    monkeypatch.chdir(tmp_path)
    return Path("bundles")


def _deploy_setup(bundle_dir: Path) -> Callable[[Pilot[None]], Awaitable[None]]:
    async def setup(pilot: Pilot[None]) -> None:
        app: EdgeConsoleApp = pilot.app  # type: ignore[assignment]
        _fill_fleet(app)
        screen = DeployScreen(["id-kitchen-pi"], root=bundle_dir)
        await app.push_screen(screen)
        await pilot.pause()
        tree = screen.query_one(BundleTree)
        for _ in range(200):  # the file picker lists the folder in a worker: wait for it
            if tree.root.children:
                break
            await pilot.pause(0.05)
        await pilot.pause()
        for path in sorted(bundle_dir.glob("*.edgepkg")):
            screen.toggle_bundle(path)
        await pilot.pause()
        targets = screen.query_one("#target-list", TargetList)
        targets.focus()
        targets.highlighted = screen._target_keys.index("id-kitchen-pi")
        await pilot.press("c")  # kitchen-pi is the canary, marked in the list
        screen.query_one(BundleTree).focus()
        targets = [a for a in app.fleet.agents() if a.name in ("kitchen-pi", "edge-x86-a")]
        screen.show_targets(targets, "id-kitchen-pi")
        await pilot.pause()
        screen.show_progress(TargetProgress(
            "id-kitchen-pi", "kitchen-pi", canary=True, phase=Phase.SOAKING,
            bundles=("mlp-2-arm64-cpu-onnxruntime.edgepkg",), sent=20480, total=20480,
            steps=(StepInfo("received", True, "20480 bytes"),
                   StepInfo("committed", True, "version 2 is active")),
            message="healthy; watching 21s more"))
        screen.show_progress(TargetProgress("id-edge-x86-a", "edge-x86-a", total=20480))
        await pilot.pause()

    return setup


def test_deploy_screen(snap_compare, bundle_dir: Path) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_app(), terminal_size=SIZE, run_before=_deploy_setup(bundle_dir))


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
def test_deploy_screen_at_every_size(snap_compare, bundle_dir: Path,  # type: ignore[no-untyped-def]
                                     size: tuple[int, int]) -> None:
    """80x24 keeps the Start button and the rollout rows on screen."""
    assert snap_compare(_app(), terminal_size=size, run_before=_deploy_setup(bundle_dir))


def test_rollouts_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """A running rollout (progress in the header) and an ended one, with per-target steps."""
    async def setup(pilot: Pilot[None]) -> None:
        app: EdgeConsoleApp = pilot.app  # type: ignore[assignment]
        _fill_fleet(app)
        old = app.rollouts.add("mlp v2 to 1 agent(s)", [TargetProgress(
            "id-edge-x86-a", "edge-x86-a", canary=True)], "id-edge-x86-a")
        app.rollouts.finished(old.id, RolloutOutcome(False, "canary edge-x86-a failed: "
                                                     "refused the token; nothing else touched",
                                                     {"id-edge-x86-a": TargetProgress(
                                                         "id-edge-x86-a", "edge-x86-a",
                                                         canary=True, phase=Phase.FAILED,
                                                         message="refused the token")}))
        job = app.rollouts.add("mlp v3 to 2 agent(s)", [
            TargetProgress("id-kitchen-pi", "kitchen-pi", canary=True),
            TargetProgress("10.0.0.9:50051", "line-9")], "id-kitchen-pi")
        app.rollouts.progress(job.id, TargetProgress(
            "id-kitchen-pi", "kitchen-pi", canary=True, phase=Phase.SOAKING, sent=20480,
            total=20480, steps=(StepInfo("received", True, "20480 bytes", NOW + 1),
                                StepInfo("committed", True, "version 3 is active", NOW + 4)),
            message="healthy; watching 21s more"))
        await pilot.press("R")
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=SIZE, run_before=setup)
