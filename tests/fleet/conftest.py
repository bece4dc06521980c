"""Fixtures: a real Mosquitto, a real docker-registry, and real agents in one fleet group."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from console.commands import resolve_reference
from console.fleet_broker import FleetBroker
from packager.bundle.signing import load_private_key
from packager.cli import main as edge_pack
from tests.registry.registry_proc import BINARY as REGISTRY_BINARY
from tests.registry.registry_proc import SKIP_REASON as REGISTRY_SKIP
from tests.registry.registry_proc import RegistryProcess, running_registry
from tests.support.bundles import Bundles, build_all
from tests.support.harness import AgentProcess
from tests.support.mosquitto import BINARY as MOSQUITTO_BINARY
from tests.support.mosquitto import SKIP_REASON as MOSQUITTO_SKIP
from tests.support.mosquitto import Mosquitto, running_mosquitto


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    return build_all(tmp_path_factory.mktemp("fleet-bundles"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    if MOSQUITTO_BINARY is None:
        pytest.skip(MOSQUITTO_SKIP)
    with running_mosquitto(tmp_path_factory.mktemp("mosquitto")) as b:
        yield b


def fleet_agent(root: Path, bundles: Bundles, broker: Mosquitto, group: str, name: str, *,
                allow: list[str], insecure: list[str], management: bool = True,
                keepalive_s: int = 30, fleet_lines: str = "") -> AgentProcess:
    """An agent in ``group`` (agent id = ``name``); ``management`` False: no management port
    at all (an agent behind NAT, reached through the broker alone); ``fleet_lines`` more keys
    of its ``[fleet]`` table."""
    root.mkdir(parents=True)
    config = root / "agent.toml"
    config.write_text(f"[registry]\nallow = {json.dumps(allow)}\n"
                      f"insecure = {json.dumps(insecure)}\nretries = 1\n"
                      f"[fleet]\nbroker = \"{broker.url}\"\ngroup = \"{group}\"\n"
                      f"keepalive_s = {keepalive_s}\nmetrics_interval_s = 5\n{fleet_lines}")
    extra = ["--no-mdns", "--config", str(config)]
    if not management:
        extra += ["--management", "none"]
    return AgentProcess(root / "state", trust=bundles.public_key, name=name, extra=extra)


@dataclass
class Fleet:
    broker: Mosquitto
    registry: RegistryProcess
    group: str
    agents: dict[str, AgentProcess]
    bundles: Bundles
    refs: dict[str, str] = field(default_factory=dict)

    def push(self, bundle: Path, repo_tag: str) -> str:
        """Push ``bundle`` to REPO:TAG on the registry; its reference pinned by digest."""
        ref = f"oci://{self.registry.address}/{repo_tag}"
        assert edge_pack(["push", str(bundle), ref, "--insecure", "-q"]) == 0
        return str(resolve_reference(ref, insecure=True).reference.pinned())

    def console(self) -> FleetBroker:
        return FleetBroker(self.broker.url)

    @property
    def key(self):  # type: ignore[no-untyped-def]
        return load_private_key(self.bundles.private_key)


@pytest.fixture(scope="module")
def fleet(bundles: Bundles, broker: Mosquitto,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if REGISTRY_BINARY is None:
        pytest.skip(REGISTRY_SKIP)
    root = tmp_path_factory.mktemp("fleet")
    group = f"g-{uuid.uuid4().hex[:8]}"
    with running_registry(root / "registry") as reg:
        # b may pull only from edge/, the others from bad/ too: a wave that pulls from bad/
        # fails on b alone
        edge, bad = f"{reg.address}/edge", f"{reg.address}/bad"
        names = {"a": [edge, bad], "b": [edge], "nat": [edge, bad]}
        ids = {k: f"{k}-{uuid.uuid4().hex[:6]}" for k in names}
        with fleet_agent(root / "a", bundles, broker, group, ids["a"], allow=names["a"],
                         insecure=[reg.address]) as a, \
                fleet_agent(root / "b", bundles, broker, group, ids["b"], allow=names["b"],
                            insecure=[reg.address]) as b, \
                fleet_agent(root / "nat", bundles, broker, group, ids["nat"],
                            allow=names["nat"], insecure=[reg.address],
                            management=False) as nat:
            yield Fleet(broker, reg, group, {"a": a, "b": b, "nat": nat}, bundles)
