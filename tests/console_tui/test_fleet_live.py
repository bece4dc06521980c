"""The fleet screen against real agents on loopback: discovery, filter, offline, error states."""

from __future__ import annotations

import asyncio
import socket
import uuid
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
    # loopback mDNS is shared with other test runs: unique names, and only ours are checked
    tag = uuid.uuid4().hex[:6]
    a_name, b_name = f"alpha-{tag}", f"beta-{tag}"
    alpha, beta = agents(a_name), agents(b_name)
    app = console_app(tokens={a_name: alpha.token, b_name: beta.token})
    async with app.run_test(size=(130, 30)) as pilot:
        fleet = app.fleet

        def states() -> dict[str, AgentState]:
            return {a.name: a.state for a in fleet.agents() if a.name in (a_name, b_name)}

        def shown() -> list[str]:
            return [fleet.get(k).name for k in screen.table._order]

        await wait_for(pilot, lambda: states() == {a_name: AgentState.ONLINE,
                                                   b_name: AgentState.ONLINE},
                       "both agents discovered and online")
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        assert fleet.find(a_name).agent_id == alpha.agent_id
        assert fleet.find(a_name).address == alpha.address

        await pilot.press("slash", *tag, "enter")
        assert shown() == [a_name, b_name]
        assert "showing 2" in screen.sub_title
        await pilot.press("escape", "slash", *f"beta {tag}", "enter")
        assert shown() == [b_name]
        assert "showing 1" in screen.sub_title
        await pilot.press("escape")
        assert len(shown()) == len(fleet) >= 2

        await pilot.press("s")  # sort by the next column: status
        assert screen.sort_column == "status"

        await asyncio.to_thread(beta.stop)
        await wait_for(pilot, lambda: states().get(b_name) is AgentState.OFFLINE,
                       "beta shown offline")
        gone = fleet.find(b_name)
        assert gone.last_seen is not None and gone.message
        await pilot.pause(0.5)
        assert states()[a_name] is AgentState.ONLINE
        assert any(e.agent == b_name and e.text.startswith("went offline")
                   for e in fleet.events)

        await pilot.press("slash", *f"offline {tag}", "enter")
        assert shown() == [b_name]
        await pilot.press("escape", "d")
        details = app.screen
        assert isinstance(details, DetailsScreen) and details.agent.name == b_name  # kept
        assert details.agent.state is AgentState.OFFLINE
        await pilot.press("escape", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "enter")
        assert isinstance(app.screen, AgentScreen)


async def test_wrong_token_unreachable_and_api_mismatch_are_clear_states(
        agents: Callable[..., RunningAgent], unused_tcp_port: int) -> None:
    gamma = agents("gamma", mdns=False)
    future_name = f"future-{uuid.uuid4().hex[:8]}"
    future = Advertiser(AgentAdvert(id=future_name, name=future_name, arch="x86_64",
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

            await wait_for(pilot, lambda: (state("gamma"), state("nobody"), state(future_name))
                           == (AgentState.AUTH_FAILED, AgentState.UNREACHABLE,
                               AgentState.API_MISMATCH), "the three problem states")
            assert "token" in app.fleet.find("gamma").message
            assert "cannot reach" in app.fleet.find("nobody").message
            assert "v2" in app.fleet.find(future_name).message
            screen = app.screen
            assert isinstance(screen, FleetScreen)
            for name in ("gamma", "nobody", future_name):
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


async def test_input_never_waits_for_a_hung_agent_and_polls_never_overlap() -> None:
    with socket.socket() as hung:  # accepts TCP (backlog) but never speaks HTTP/2
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        port = hung.getsockname()[1]
        app = console_app(discovery=False, agents=(StaticAgent("127.0.0.1", port, "hung"),
                                                   StaticAgent("127.0.0.1", 1, "refusing")))
        async with app.run_test(size=(130, 30)) as pilot:
            await wait_for(pilot, lambda: app.polling, "the first poll round in flight")
            screen = app.screen
            assert isinstance(screen, FleetScreen)
            await pilot.press("slash", *"refus", "enter")  # answered while the probe hangs
            assert app.polling and app.poll_rounds == 0
            assert [app.fleet.get(k).name for k in screen.table._order] == ["refusing"]
            await pilot.press("ctrl+r")  # asks for a round: queued, not a second one
            assert app.polling and app.poll_rounds == 0
            await wait_for(pilot, lambda: app.poll_rounds >= 1, "the round to time out")
            hung_agent = app.fleet.find("hung")
            assert hung_agent.state is AgentState.UNREACHABLE
            assert "did not answer" in hung_agent.message or "cannot reach" in hung_agent.message
            await wait_for(pilot, lambda: app.poll_rounds >= 2, "the asked-for round")
