"""The fleet screen against real agents on loopback: discovery, filter, offline, error states."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from console.config import StaticAgent
from console.fleet import AgentState
from console.screens.agent import AgentScreen
from console.screens.details import DetailsScreen
from console.screens.fleet import FleetScreen
from console.screens.help import HelpScreen
from edge_agent.discovery import Advertiser, AgentAdvert
from tests.console_tui.agents import RunningAgent
from tests.console_tui.conftest import LOOPBACK, console_app, wait_for


async def test_agents_appear_by_discovery_filter_and_go_offline(
        agents: Callable[..., RunningAgent]) -> None:
    alpha, beta = agents("alpha"), agents("beta")
    app = console_app(tokens={"alpha": alpha.token, "beta": beta.token})
    async with app.run_test(size=(130, 30)) as pilot:
        fleet = app.fleet

        def states() -> dict[str, AgentState]:
            return {a.name: a.state for a in fleet.agents()}

        await wait_for(pilot, lambda: states() == {"alpha": AgentState.ONLINE,
                                                   "beta": AgentState.ONLINE},
                       "both agents discovered and online")
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        assert [fleet.get(k).name for k in screen.table._order] == ["alpha", "beta"]
        assert fleet.find("alpha").agent_id == alpha.agent_id
        assert fleet.find("alpha").address == alpha.address

        await pilot.press("slash", *"bet", "enter")
        assert [fleet.get(k).name for k in screen.table._order] == ["beta"]
        assert "2 agents · 2 online · showing 1" in screen.sub_title
        await pilot.press("escape")
        assert len(screen.table._order) == 2

        await pilot.press("s")  # sort by status, then reverse by name via the header
        assert screen.sort_column == "status"

        await asyncio.to_thread(beta.stop)
        await wait_for(pilot, lambda: states().get("beta") is AgentState.OFFLINE,
                       "beta shown offline")
        gone = fleet.find("beta")
        assert gone.last_seen is not None and gone.message
        await pilot.pause(0.5)
        assert states()["alpha"] is AgentState.ONLINE
        assert any(e.agent == "beta" and e.text.startswith("went offline")
                   for e in fleet.events)

        await pilot.press("slash", *"offline", "enter")
        assert [fleet.get(k).name for k in screen.table._order] == ["beta"]
        await pilot.press("escape", "d")
        details = app.screen
        assert isinstance(details, DetailsScreen) and details.agent.name == "beta"  # kept
        assert details.agent.state is AgentState.OFFLINE
        await pilot.press("escape", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "enter")
        assert isinstance(app.screen, AgentScreen)


async def test_wrong_token_unreachable_and_api_mismatch_are_clear_states(
        agents: Callable[..., RunningAgent], unused_tcp_port: int) -> None:
    gamma = agents("gamma", mdns=False)
    future = Advertiser(AgentAdvert(id="future-1", name="future", arch="x86_64",
                                    profile="x86_64-cpu-onnxruntime", mgmt_port=1, grpc_port=2,
                                    api="2"), interfaces=list(LOOPBACK))
    await future.start()
    try:
        host, port = gamma.address.rsplit(":", 1)
        app = console_app(tokens={"gamma": "not-the-token"}, agents=(
            StaticAgent(host, int(port), "gamma", "not-the-token"),
            StaticAgent("127.0.0.1", unused_tcp_port, "nobody")))
        async with app.run_test(size=(130, 30)) as pilot:
            def state(name: str) -> AgentState | None:
                agent = app.fleet.find(name)
                return None if agent is None else agent.state

            await wait_for(pilot, lambda: (state("gamma"), state("nobody"), state("future"))
                           == (AgentState.AUTH_FAILED, AgentState.UNREACHABLE,
                               AgentState.API_MISMATCH), "the three problem states")
            assert "token" in app.fleet.find("gamma").message
            assert "cannot reach" in app.fleet.find("nobody").message
            assert "v2" in app.fleet.find("future").message
            screen = app.screen
            assert isinstance(screen, FleetScreen)
            for name in ("gamma", "nobody", "future"):
                row = screen.table._order.index(app.fleet.find(name).key)
                screen.table.move_cursor(row=row)
                await pilot.pause()
                status = str(screen.query_one("#fleet-status").render())
                assert name in status and app.fleet.find(name).message[:30] in status
    finally:
        await future.stop()


async def test_discovery_on_a_missing_interface_is_reported_not_raised() -> None:
    app = console_app(poll=False, interfaces=("192.0.2.1",))  # TEST-NET-1: not on this host
    async with app.run_test(size=(130, 30)) as pilot:
        await wait_for(pilot, lambda: any("mDNS discovery failed" in e.text
                                          for e in app.fleet.events), "the discovery error")
        assert isinstance(app.screen, FleetScreen)
        assert "--agent HOST:PORT" in app.fleet.events[-1].text
