"""``edge-console fleet view``: the Textual view of a group of 1,200 agents whose retained
presence and status sit on a real Mosquitto: counts per state and version, the filter."""

from __future__ import annotations

import time
import uuid

from console.fleet_broker import FleetBroker
from console.fleet_view import MAX_ROWS, BrokerFleetApp
from edge_agent.fleet import protocol as p
from edge_agent.fleet.link import make_client, shut
from tests.support.mosquitto import Mosquitto

REF = "oci://127.0.0.1:5000/edge/mlp@sha256:" + "c" * 64
AGENTS = 1200


def _publish_fleet(broker: Mosquitto, group: str) -> None:
    """1,200 agents: every 10th failed, every 7th (not failed) offline, the rest ok."""
    client = make_client(f"seed-{uuid.uuid4().hex[:6]}", p.parse_broker_url(broker.url))
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    try:
        infos = []
        for i in range(AGENTS):
            agent = f"v-{i:04d}"
            failed = i % 10 == 0
            online = failed or i % 7 != 0
            status = p.ModelStatus(REF, "failed" if failed else "ok", 1 if failed else 2,
                                   "parity: max abs error 0.4" if failed else "")
            infos.append(client.publish(p.presence_topic(agent), p.presence_document(
                agent, group, online), qos=1, retain=True))
            infos.append(client.publish(p.status_topic(agent), p.status_document(
                agent, group, 3, {"mlp": status}, None, time.time()), qos=1, retain=True))
        for info in infos:
            info.wait_for_publish(60)
    finally:
        shut(client)


async def test_the_view_counts_and_filters_thousands_of_agents(broker: Mosquitto) -> None:
    group = f"view-{uuid.uuid4().hex[:6]}"
    _publish_fleet(broker, group)
    failed = len(range(0, AGENTS, 10))
    offline = sum(1 for i in range(AGENTS) if i % 10 and i % 7 == 0)
    with FleetBroker(broker.url) as fb:
        assert fb.wait_until(lambda: sum(a.status is not None
                                         for a in fb.group_agents(group)) == AGENTS, 120)
        app = BrokerFleetApp(fb, group)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause()
            summary = str(app.query_one("#summary").render())
            assert f"{AGENTS} agents" in summary and f"failed {failed}" in summary
            assert f"offline {offline}" in summary and f"ok {AGENTS - failed - offline}" \
                in summary
            assert f"mlp:1 {failed}" in summary
            table = app.query_one("DataTable")
            assert table.row_count == MAX_ROWS  # capped; failed first
            assert str(table.get_row_at(0)[1]) == "failed"
            app.query_one("#filter").focus()
            await pilot.press(*"failed")
            await pilot.pause()
            assert app.query_one("DataTable").row_count == failed
