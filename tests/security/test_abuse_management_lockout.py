"""Management lockout without a token (issue 27): 1,000 silent TCP connections from one address
(127.0.0.2) filled the management port's single global connection cap, and 31 of 34 operator
calls from another address failed. A real in-process agent, TLS on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

from benchmarks.attacks.management_lockout import SilentConnections
from edge_agent.client.agent_client import AgentClient, ManagementError, PinnedTls
from edge_agent.management.tls import fingerprint_of
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import sections, start_agent

OPERATOR_CALLS = 20


def test_silent_connections_from_one_address_leave_the_operator_served(
        bundles: Bundles, tmp_path: Path) -> None:
    agent = start_agent(tmp_path / "state", sections("lockout", bundles.public_key), tls=True)
    try:
        token = agent.token
        pin = PinnedTls(fingerprint_of(agent.state_dir))
        with SilentConnections(agent.management, 1000) as hostile:
            eventually(lambda: hostile.opened >= 1000, timeout=60,
                       message=lambda: f"{hostile.opened} hostile connections opened")
            failures: list[str] = []
            for _ in range(OPERATOR_CALLS):  # a fresh connection each, as `edge-console` makes
                try:
                    with AgentClient(agent.management, token=token, tls=pin,
                                     timeout_s=10) as client:
                        assert client.info().agent_id
                except ManagementError as exc:
                    failures.append(str(exc))
            assert failures == [], f"{len(failures)} of {OPERATOR_CALLS} failed: {failures[:3]}"
            assert hostile.held > 0  # the attack was still going on
    finally:
        agent.stop()
