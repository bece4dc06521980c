"""First contact with a TLS agent in the terminal UI: the fingerprint is shown in a modal, and
the agent is pinned (known_agents) and polled only after the operator trusts it. A real agent
over real TLS."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from console.config import StaticAgent
from console.fleet import AgentState
from console.known_agents import KnownAgents
from console.screens.confirm import ConfirmScreen
from edge_agent.management.tls import fingerprint_of
from tests.console_tui.agents import RunningAgent
from tests.console_tui.conftest import console_app, wait_for


async def test_first_contact_asks_and_pins(agents: Callable[..., RunningAgent],
                                           tmp_path: Path) -> None:
    alpha = agents("alpha", mdns=False, tls=True)
    known = tmp_path / "known_agents"
    fp = fingerprint_of(alpha.state_dir)
    app = console_app(discovery=False, tokens={alpha.address: alpha.token}, insecure=False,
                      known_agents=known,
                      agents=(StaticAgent("127.0.0.1", int(alpha.address.rsplit(":")[1]),
                                          "alpha"),))
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "trust question")
        assert fp in app.screen.question and alpha.address in app.screen.question
        row = app.fleet.find("alpha")
        assert row is not None and row.state is AgentState.UNREACHABLE
        assert "not known yet" in row.message and not known.exists()
        await pilot.press("y")
        await wait_for(pilot, lambda: app.fleet.find("alpha").state is AgentState.ONLINE,
                       "alpha online after trusting it")
        pin = KnownAgents(known).lookup(alpha.address)
        assert pin is not None and pin.fingerprint == fp
        details = app.fleet.find("alpha").details
        assert details["connection"] == f"TLS, pinned certificate {fp}"
