"""The console's TUI with ``--broker`` (docs/fleet.md, docs/console.md): a fleet's agents,
read from a real Mosquitto, listed beside the mDNS ones, grouped, with counts per state and
version and the fleet screen's filter; a drill-down opens the agent screen over the direct
management connection when the agent's management address answers (a real agent), and the
broker's view of the agent when it has none (bench_fleet's simulated agents)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.bench_fleet import SimAgent
from console.app import EdgeConsoleApp
from console.config import BrokerSettings, ConsoleSettings
from console.fleet import AgentState
from console.fleet_broker import FleetBroker
from console.fleet_view import BrokerAgents
from console.screens.agent import AgentScreen
from console.screens.broker_agent import BrokerAgentScreen
from console.screens.fleet import FleetScreen
from edge_agent.fleet import protocol as p
from packager.bundle.signing import load_private_key, load_public_key
from tests.console_tui.conftest import wait_for
from tests.fleet.conftest import fleet_agent
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess
from tests.support.mosquitto import Mosquitto

pytestmark = [pytest.mark.slow]

DEADLINE_S = 120.0
SIMULATED = 40  # 30 in the group (10 of them failing the deploy), 10 in another group
BAD = "oci://127.0.0.1:9/bad/mlp@sha256:" + "d" * 64  # never pulled: simulated, or refused


@pytest.fixture
def fleet(broker: Mosquitto, bundles: Bundles,
          tmp_path: Path) -> Iterator[tuple[str, str, AgentProcess, list[SimAgent]]]:
    """A real agent (management on 127.0.0.1) and simulated agents in two groups."""
    tag = uuid.uuid4().hex[:6]
    group, other = f"tui-{tag}", f"tui2-{tag}"
    trusted = [load_public_key(bundles.public_key)]
    address = p.parse_broker_url(broker.url)
    sims = [SimAgent(f"sim-{i:03d}-{tag}", group if i < 30 else other, address, trusted,
                     1.0 if i < 10 else 0.0, 3600.0) for i in range(SIMULATED)]
    with fleet_agent(tmp_path / "real", bundles, broker, group, f"real-{tag}", allow=[],
                     insecure=[]) as real:
        for sim in sims:
            sim.start()
        try:
            with FleetBroker(broker.url) as console:  # every agent of the group deploys BAD
                console.publish(p.Desired(group, 1, {"mlp": p.ModelTarget(BAD)}),
                                load_private_key(bundles.private_key))
            yield group, other, real, sims
        finally:
            for sim in sims:
                sim.stop()


def _summary(panel: BrokerAgents) -> str:
    return str(panel.query_one("#summary").render())


async def test_the_console_lists_broker_agents_beside_mdns_ones_and_drills_down(
        broker: Mosquitto, fleet: tuple[str, str, AgentProcess, list[SimAgent]]) -> None:
    group, other, real, sims = fleet
    settings = ConsoleSettings(discovery=False, insecure=True, poll_interval_s=0.3,
                               tokens={real.name: real.token},
                               broker=BrokerSettings(broker.url))
    app = EdgeConsoleApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        panel = screen.broker_panel
        assert panel is not None

        def reported() -> bool:  # the real agent refused BAD, every simulated one reported
            agents = app.broker.group_agents(group) if app.broker else []
            return len(agents) == 31 and all(a.models for a in agents)

        await wait_for(pilot, reported, "every agent of the group reporting", DEADLINE_S)
        # 10 simulated agents fail the deploy, and so does the real one (its [registry]
        # allow list is empty); 20 serve mlp version 2; the other group has no state yet.
        # The panel redraws on its own timer, so wait for the redraw after the last report.
        settled = f"group {group}: 31 agents: failed 11  ok 20"
        await wait_for(pilot, lambda: "41 agents" in _summary(panel)
                       and settled in _summary(panel), "the panel's counts", DEADLINE_S,
                       shown=lambda: _summary(panel))
        summary = _summary(panel)
        assert settled in summary, summary
        assert f"group {other}: 10 agents: pending 10" in summary, summary
        assert "mlp:2 20" in summary and "mlp:1 10" in summary, summary
        assert panel.table.row_count == 41
        assert str(panel.table.get_row_at(0)[1]) == "failed"  # grouped, failed first

        await pilot.press("slash", *real.name, "enter")  # the fleet screen's one filter
        await wait_for(pilot, lambda: panel.table.row_count == 1, "the filtered table")
        assert "shown: 1 of 1 matching" in _summary(panel)
        await pilot.press("tab")  # from the mDNS table to the broker's
        assert screen.focused is panel.table
        await pilot.press("enter")  # reachable: the direct management connection
        await wait_for(pilot, lambda: isinstance(app.screen, AgentScreen),
                       "the agent screen over the direct connection", DEADLINE_S)
        direct = app.fleet.find(real.name)
        assert direct is not None and direct.state is AgentState.ONLINE
        assert direct.address == real.management

        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "back on the fleet screen")
        sim = sims[0].agent_id  # failing the deploy, and no management address
        screen.query_one("#fleet-filter").value = sim
        await wait_for(pilot, lambda: panel.table.row_count == 1, "the simulated agent")
        panel.table.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, BrokerAgentScreen) and sim in str(
            app.screen.query_one("#broker-agent-body").render()), "the broker's view of the agent")
        body = str(app.screen.query_one("#broker-agent-body").render())
        why = str(app.screen.query_one("#broker-agent-why").render())
        assert "no management address" in why
        assert sim in body and "failed" in body and "parity: max abs error" in body
