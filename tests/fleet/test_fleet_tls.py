"""TLS to the broker (docs/fleet.md): a Mosquitto with a certificate from a private CA is
refused until that CA is given (console: --ca; agent: [fleet] ca_file), and then an agent
joins its group over mqtts:// alone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.fleet_broker import FleetBroker, FleetBrokerError
from edge_agent.fleet.link import BrokerCredentials
from edge_agent.management.tls import load_or_create
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess
from tests.support.mosquitto import BINARY, SKIP_REASON, Mosquitto, running_mosquitto

pytestmark = pytest.mark.skipif(BINARY is None, reason=SKIP_REASON)


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[tuple[Mosquitto, Path]]:
    (tmp_path / "certs").mkdir()
    cert, key = load_or_create(tmp_path / "certs")  # self-signed (its own CA), names 127.0.0.1
    with running_mosquitto(tmp_path / "mosquitto", tls=(cert, key)) as broker:
        yield broker, cert


def test_tls_to_the_broker_with_a_private_ca(tls_broker: tuple[Mosquitto, Path],
                                             bundles: Bundles, tmp_path: Path) -> None:
    broker, ca = tls_broker
    assert broker.url.startswith("mqtts://")
    with pytest.raises(FleetBrokerError, match="certificate verify failed"):
        FleetBroker(broker.url).connect(timeout_s=30)
    group, name = f"tls-{uuid.uuid4().hex[:6]}", f"tls-agent-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "agent.toml"
    config.write_text(f"[fleet]\nbroker = \"{broker.url}\"\ngroup = \"{group}\"\n"
                      f"ca_file = \"{ca}\"\n")
    with AgentProcess(tmp_path / "state", trust=bundles.public_key, name=name,
                      extra=["--no-mdns", "--config", str(config), "--management", "none"]), \
            FleetBroker(broker.url, BrokerCredentials(ca_file=ca)) as console:
        assert console.wait_until(lambda: any(a.agent_id == name and a.online
                                              for a in console.group_agents(group)), 120)
