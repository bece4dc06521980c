"""The Mosquitto ACL of docs/fleet.md, as written there, on a real Mosquitto: an agent
publishes only under its own id and reads only its group's desired state; the console
publishes desired states and reads every report."""

from __future__ import annotations

import re
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.fleet import protocol as p
from edge_agent.fleet.link import BrokerCredentials, Connected, make_client, shut
from tests.support.mosquitto import BINARY, SKIP_REASON, Mosquitto, running_mosquitto

pytestmark = pytest.mark.skipif(BINARY is None, reason=SKIP_REASON)

DOC = Path(__file__).resolve().parents[2] / "docs" / "fleet.md"
USERS = ("fleet-console", "cam-17", "cam-18")  # the doc's users; cam-18 has no group line
WAIT_S = 60.0


def doc_acl() -> str:
    """The ACL block of docs/fleet.md."""
    match = re.search(r"```text\n(# /etc/mosquitto/acl.*?)```", DOC.read_text(), re.S)
    assert match, "docs/fleet.md lost its ACL block"
    return match.group(1)


class Peer:
    """A client logged in as ``user`` that records what it receives."""

    def __init__(self, broker: Mosquitto, user: str) -> None:
        self.got: list[tuple[str, bytes]] = []
        self.changed = threading.Condition()
        self.connected = Connected()
        self.client = make_client(f"{user}-{uuid.uuid4().hex[:6]}", p.parse_broker_url(
            broker.url), BrokerCredentials(username=user, password=f"pw-{user}"))
        self.client.on_connect = lambda c, u, f, reason, props: self.connected.record(reason)
        self.client.on_message = self._got
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()
        self.connected.wait(WAIT_S, p.parse_broker_url(broker.url))

    def _got(self, client: Any, userdata: Any, message: Any) -> None:
        with self.changed:
            self.got.append((message.topic, bytes(message.payload)))
            self.changed.notify_all()

    def wait_for(self, topic: str, payload: bytes) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: (topic, payload) in self.got, WAIT_S)

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(WAIT_S)

    def subscribe(self, topic: str) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda *a: done.set()
        self.client.subscribe(topic, 1)
        assert done.wait(WAIT_S)


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    passwords = tmp_path / "passwd"
    for i, user in enumerate(USERS):
        subprocess.run(["mosquitto_passwd", "-b", *(["-c"] if i == 0 else []),
                        str(passwords), user, f"pw-{user}"], check=True)
    acl = tmp_path / "acl"
    acl.write_text(doc_acl())
    with running_mosquitto(tmp_path / "mosquitto", extra=(
            f"allow_anonymous false\npassword_file {passwords}\nacl_file {acl}\n")) as broker:
        yield broker


def test_the_documented_acl_confines_each_agent(acl_broker: Mosquitto) -> None:
    console, cam17, cam18 = (Peer(acl_broker, u) for u in USERS)
    try:
        console.subscribe("edge/v1/agents/#")
        console.subscribe(p.ALL_GROUPS_DESIRED)
        own, forged = p.status_topic("cam-17"), p.status_topic("cam-18")
        cam17.publish(forged, b"forged by cam-17")  # another agent's topic: dropped
        cam17.publish(p.group_desired_topic("store-cameras"), b"desired by cam-17")  # dropped
        cam17.publish(own, b"mine")
        assert console.wait_for(own, b"mine")  # after the two refused, in order
        assert (forged, b"forged by cam-17") not in console.got
        assert not [t for t, _ in console.got if t.endswith("/desired")]
        # the group's desired state: its agent reads it, an agent of no group does not
        desired = p.group_desired_topic("store-cameras")
        console.publish(desired, b"signed state", retain=True)
        assert console.wait_for(desired, b"signed state")
        cam17.subscribe(desired)
        cam18.subscribe(desired)
        cam18.subscribe(p.agent_desired_topic("cam-18"))
        console.publish(p.agent_desired_topic("cam-18"), b"for cam-18")
        assert cam17.wait_for(desired, b"signed state")
        assert cam18.wait_for(p.agent_desired_topic("cam-18"), b"for cam-18")
        assert (desired, b"signed state") not in cam18.got
    finally:
        for peer in (console, cam17, cam18):
            shut(peer.client)
