"""``[fleet]``: the agent as a member of a fleet managed through an MQTT broker
(docs/fleet.md). Off unless ``broker`` is set::

    [fleet]
    broker = "mqtts://broker.example.com:8883"   # mqtt:// (plaintext) only to a loopback host
                                      # unless allow_plaintext = true
    group = "store-cameras"           # the group whose desired state this agent follows
    agent_id = "cam-17"               # default: [management] name (--name, the host name)
    ca_file = "broker-ca.pem"         # trust this CA for the broker (default: the system's)
    client_cert = "cam-17.crt"        # client certificate and key (mutual TLS), or ...
    client_key = "cam-17.key"
    username = "cam-17"               # ... a username and the file holding its password
    password_file = "broker.password"
    keepalive_s = 30                  # MQTT keep-alive; the broker sends the last will after
                                      # 1.5 x this without a packet
    metrics_interval_s = 60           # the metrics summary's period (0: none)
    retry_initial_s = 30              # a failed deploy is tried again after this, doubling
    retry_max_s = 900                 # ... up to this (reset by a new desired state)
    allow_plaintext = false
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.config.fields import Key, boolean, in_range, parse_table, path_under, string
from edge_agent.errors import ConfigError


@dataclass(frozen=True)
class FleetConfig:
    """``[fleet]`` (see the module's docstring); ``broker`` None: not a fleet member."""

    broker: str | None = None  # checked by edge_agent.fleet.protocol.parse_broker_url at start
    group: str = ""
    agent_id: str = ""  # "": the agent's [management] name
    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    keepalive_s: int = 30
    metrics_interval_s: float = 60.0
    retry_initial_s: float = 30.0
    retry_max_s: float = 900.0
    allow_plaintext: bool = False


def fleet_section(data: Mapping[str, Any], base_dir: Path | None) -> FleetConfig:
    """``[fleet]`` checked: a broker and a group, credentials in pairs, the files there. The
    broker URL, the names' pattern and TLS-unless-allowed-off are the protocol's, checked
    when the fleet link starts (:func:`edge_agent.fleet.member.FleetMember`)."""
    path = path_under(base_dir)
    keys = (Key("broker", string), Key("group", string), Key("agent_id", string),
            Key("ca_file", path), Key("client_cert", path), Key("client_key", path),
            Key("username", string), Key("password_file", path),
            Key("keepalive_s", in_range(int, 5, 3600)),
            Key("metrics_interval_s", in_range((int, float), 0)),
            Key("retry_initial_s", in_range((int, float), 1, 86400)),
            Key("retry_max_s", in_range((int, float), 1, 7 * 86400)),
            Key("allow_plaintext", boolean))
    values = parse_table("fleet", data.get("fleet", {}), keys)
    for name in ("metrics_interval_s", "retry_initial_s", "retry_max_s"):
        if name in values:
            values[name] = float(values[name])
    config = FleetConfig(**values)
    if config.broker is None:
        if len(values):
            raise ConfigError("config key 'fleet.broker' is missing: [fleet] needs the "
                              "broker's address (mqtts://HOST:8883)")
        return config
    if not config.group:
        raise ConfigError("config key 'fleet.group' is missing: name the group whose desired "
                          "state this agent follows")
    if config.retry_max_s < config.retry_initial_s:
        raise ConfigError(f"config key 'fleet.retry_max_s' ({config.retry_max_s:g}) is below "
                          f"'fleet.retry_initial_s' ({config.retry_initial_s:g}); raise it")
    if (config.client_cert is None) != (config.client_key is None):
        raise ConfigError("config keys 'fleet.client_cert' and 'fleet.client_key' go together")
    if (config.username is None) != (config.password_file is None):
        raise ConfigError("config keys 'fleet.username' and 'fleet.password_file' go together")
    for name in ("ca_file", "client_cert", "client_key", "password_file"):
        file = getattr(config, name)
        if file is not None and not file.is_file():
            raise ConfigError(f"config key 'fleet.{name}': {file} is not a file")
    return config
