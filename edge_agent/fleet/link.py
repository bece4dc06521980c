"""The one place that builds an MQTT 5 client (paho-mqtt 2.x, imported here only): TLS,
credentials and the last will, for the agent's fleet member and the console's fleet commands.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge_agent.errors import ConfigError
from edge_agent.fleet.protocol import BrokerAddress
from packager.extras import refusal

if TYPE_CHECKING:  # imported at run time by make_client: every module imports without [fleet]
    import paho.mqtt.client as mqtt


@dataclass(frozen=True)
class BrokerCredentials:
    """How to prove who we are to the broker and whom to trust for its certificate."""

    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    username: str | None = None
    password: str | None = None


def make_client(client_id: str, broker: BrokerAddress,
                credentials: BrokerCredentials = BrokerCredentials(), *,
                will: tuple[str, bytes] | None = None) -> mqtt.Client:
    """An MQTT 5 client (not connected): TLS when ``broker.tls`` (the CA file, or the
    system's), a client certificate or username/password, ``will`` published retained (QoS 1)
    by the broker when the connection is lost without a DISCONNECT; ConfigError in one line
    when the ``[fleet]`` extra (paho-mqtt) is not installed."""
    try:
        import paho.mqtt.client as paho_client
        from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
    except ImportError:
        raise ConfigError(refusal("fleet", "a fleet broker")
                          or "a fleet broker needs paho-mqtt") from None
    client = paho_client.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                                protocol=MQTTProtocolVersion.MQTTv5)
    if broker.tls:
        client.tls_set(ca_certs=str(credentials.ca_file) if credentials.ca_file else None,
                       certfile=str(credentials.client_cert) if credentials.client_cert
                       else None,
                       keyfile=str(credentials.client_key) if credentials.client_key else None)
    if credentials.username is not None:
        client.username_pw_set(credentials.username, credentials.password)
    if will is not None:
        client.will_set(will[0], will[1], qos=1, retain=True)
    client.reconnect_delay_set(1, 30)
    return client


class Connected:
    """Set when the client's CONNACK succeeded; the reason when it failed."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.failure = ""

    def record(self, reason: object) -> bool:
        """Note a CONNACK's reason code (paho's ``ReasonCode``); True when it succeeded."""
        failed = bool(getattr(reason, "is_failure", False))
        if failed:
            self.failure = str(reason)
        self.event.set()
        return not failed

    def wait(self, timeout_s: float, broker: BrokerAddress) -> None:
        """Block until connected; ConnectionError naming the broker and the reason if not."""
        if not self.event.wait(timeout_s) or self.failure:
            raise ConnectionError(f"could not connect to the MQTT broker {broker}: "
                                  f"{self.failure or f'no answer within {timeout_s:g} s'}")


def shut(client: mqtt.Client) -> None:
    """Disconnect (no last will) and stop the network thread."""
    client.disconnect()
    client.loop_stop()
