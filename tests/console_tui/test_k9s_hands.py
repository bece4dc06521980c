"""Issue 18 "k9s hands": vi motions, k9s filters (regex, ``!negation``) that collapse into the
header, a filterable events view, ``:agent`` by unique prefix with Enter taking the completion,
jumps that replace the view stack, and offline agents that can be hidden or forgotten.

Pilot tests on fixed data (no network)."""

from __future__ import annotations

from textual.widgets import DataTable, Input

from console.app import EdgeConsoleApp
from console.config import ConsoleSettings
from console.discovery import DiscoveredAgent, DiscoveryEvent
from console.filtering import parse_filter
from console.fleet import AgentState, Fleet, ProbeResult
from console.screens.agent import AgentScreen
from console.screens.events import EventsScreen
from console.screens.fleet import FleetScreen

NOW = 1_800_000_000.0
SIZE = (130, 40)
NAMES = ("kitchen-pi", "jetson-01", "edge-x86-a", "edge-x86-b")


def _found(i: int, name: str) -> DiscoveredAgent:
    arch = "aarch64" if name in ("kitchen-pi", "jetson-01") else "x86_64"
    return DiscoveredAgent(id=f"id-{name}", name=name, host=f"10.0.0.{i}", port=50051,
                           arch=arch, profile=f"{arch}-cpu", api="1", grpc_port=8001, txt={},
                           addresses=(f"10.0.0.{i}",), last_seen=NOW)


def _fill(fleet: Fleet) -> None:
    for i, name in enumerate(NAMES, start=1):
        fleet.apply_discovery(DiscoveryEvent("added", _found(i, name)))
        fleet.apply_probe(f"id-{name}", ProbeResult(AgentState.ONLINE))
    fleet.apply_discovery(DiscoveryEvent("removed", _found(2, "jetson-01")))


def _app() -> EdgeConsoleApp:
    return EdgeConsoleApp(ConsoleSettings(discovery=False), clock=lambda: NOW, poll=False)


def test_filters_take_regexes_and_negations_and_never_raise() -> None:
    assert parse_filter("x86 !offline").matches("edge-x86-a online")
    assert not parse_filter("x86 !offline").matches("edge-x86-b offline")
    assert parse_filter("^edge-x86-[ab]$").matches("EDGE-X86-B")
    assert not parse_filter("^edge-x86-[ab]$").matches("edge-x86-c")
    assert parse_filter("a+b(").matches("xa+b(y")  # not a regex: taken literally
    assert not parse_filter("") and parse_filter("").matches("anything")
    fleet = Fleet(clock=lambda: NOW)
    _fill(fleet)
    assert [a.name for a in fleet.view("!aarch64")] == ["edge-x86-a", "edge-x86-b"]
    assert [a.name for a in fleet.view("x86-[b]")] == ["edge-x86-b"]
    assert "jetson-01" not in [a.name for a in fleet.view(show_offline=False)]


def test_only_offline_agents_can_be_forgotten() -> None:
    fleet = Fleet(clock=lambda: NOW)
    _fill(fleet)
    assert not fleet.forget("id-kitchen-pi")  # online: never dropped
    assert fleet.forget("id-jetson-01") and fleet.get("id-jetson-01") is None
    fleet.apply_discovery(DiscoveryEvent("added", _found(2, "jetson-01")))  # it comes back
    assert fleet.get("id-jetson-01") is not None


def test_unique_prefix_finds_one_agent_and_names_the_ambiguity() -> None:
    fleet = Fleet(clock=lambda: NOW)
    _fill(fleet)
    agent, _ = fleet.find_prefix("kit")
    assert agent is not None and agent.name == "kitchen-pi"
    agent, names = fleet.find_prefix("edge")
    assert agent is None and names == ["edge-x86-a", "edge-x86-b"]


async def test_vi_motions_move_the_fleet_cursor() -> None:
    app = _app()
    async with app.run_test(size=SIZE) as pilot:
        _fill(app.fleet)
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        assert table.cursor_row == 0
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == len(NAMES) - 1
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("ctrl+f")
        assert table.cursor_row == len(NAMES) - 1  # one page holds them all
        await pilot.press("ctrl+b")
        assert table.cursor_row == 0


async def test_the_filter_collapses_into_the_header_after_enter() -> None:
    app = _app()
    async with app.run_test(size=SIZE) as pilot:
        _fill(app.fleet)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await pilot.press("slash", *"!aarch64", "enter")
        await pilot.pause()
        assert screen.query_one("#fleet-filter", Input).has_class("hidden")
        assert "filter !aarch64" in screen.sub_title
        assert screen.query_one(DataTable).row_count == 2
        await pilot.press("escape")
        assert screen.query_one(DataTable).row_count == len(NAMES)


async def test_offline_agents_can_be_hidden_and_forgotten() -> None:
    app = _app()
    async with app.run_test(size=SIZE) as pilot:
        _fill(app.fleet)
        await pilot.pause()
        screen = app.screen
        table = screen.query_one(DataTable)
        assert table.row_count == len(NAMES)
        await pilot.press("o")
        assert table.row_count == len(NAMES) - 1 and "offline hidden" in screen.sub_title
        await pilot.press("o")
        assert table.row_count == len(NAMES)
        names = [str(table.get_row_at(r)[0]) for r in range(table.row_count)]
        table.move_cursor(row=names.index("jetson-01"))
        await pilot.press("x")
        await pilot.pause()
        assert app.fleet.get("id-jetson-01") is None and table.row_count == len(NAMES) - 1
        table.move_cursor(row=0)
        await pilot.press("x")  # an online agent is not forgotten
        await pilot.pause()
        assert len(app.fleet) == len(NAMES) - 1


async def test_jump_by_unique_prefix_takes_the_completion_and_replaces_the_stack() -> None:
    app = _app()
    async with app.run_test(size=SIZE) as pilot:
        _fill(app.fleet)
        await pilot.pause()
        await pilot.press("colon", *"agent kit", "enter")
        await pilot.pause()
        assert isinstance(app.screen, AgentScreen) and app.screen.key == "id-kitchen-pi"
        depth = len(app.screen_stack)
        await pilot.press("colon", *"agent edge-x86-b", "enter")
        await pilot.pause()
        assert isinstance(app.screen, AgentScreen) and app.screen.key == "id-edge-x86-b"
        assert len(app.screen_stack) == depth  # replaced, not pushed
        await pilot.press("colon", *"agent edge", "enter")  # Enter takes the shown completion
        await pilot.pause()
        assert isinstance(app.screen, AgentScreen) and app.screen.key == "id-edge-x86-a"
        app.jump_to("agent edge")  # typed past the completion: ambiguous, says so, stays
        await pilot.pause()
        assert isinstance(app.screen, AgentScreen) and app.screen.key == "id-edge-x86-a"
        await pilot.press("colon", *"eve", "enter")  # Enter takes the completion "events"
        await pilot.pause()
        assert isinstance(app.screen, EventsScreen) and len(app.screen_stack) == depth


async def test_the_events_view_is_filterable() -> None:
    app = _app()
    async with app.run_test(size=SIZE) as pilot:
        _fill(app.fleet)
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        table = screen.query_one(DataTable)
        everything = table.row_count
        assert everything >= len(NAMES) + 1
        await pilot.press("slash", *"went", "enter")
        await pilot.pause()
        assert table.row_count == 1 and "went offline" in str(table.get_row_at(0)[2])
        await pilot.press("slash", "ctrl+u", *"!jetson", "enter")
        await pilot.pause()
        assert table.row_count == everything - 2  # jetson's discovery and its goodbye
        await pilot.press("escape")  # clears the filter first
        assert isinstance(app.screen, EventsScreen) and table.row_count == everything
