"""The console's settings: the config file (static agents, tokens per agent) plus CLI overrides.

The file is TOML, by default ``$XDG_CONFIG_HOME/edge-console/config.toml``
(``~/.config/edge-console/config.toml``)::

    read_only = false            # hide every action that changes an agent
    insecure = false             # plaintext to every agent (only agents run with --insecure)
    known_agents = "~/.config/edge-console/known_agents"   # pinned agent certificates
    poll_interval_s = 2.0        # how often each agent is asked for its state
    canary_soak_s = 30           # staged rollout: how long the canary must stay healthy

    [discovery]
    enabled = true
    interfaces = ["192.168.1.20"]   # IPv4 addresses to browse on; omit for all interfaces

    [[agents]]                      # agents to list even when mDNS cannot see them
    address = "10.0.0.7:7070"
    name = "line-3"                 # optional display name
    token = "..."                   # or: token_file = "~/.config/edge-console/line-3.token"

    # TLS needs no settings: the console pins each agent's self-signed certificate on first
    # contact (known_agents). With a CA of your own instead (optional, per agent):
    tls_ca = "fleet-ca.pem"
    tls_cert = "console.pem"        # (tls_cert + tls_key: a client certificate, mTLS)
    tls_key = "console.key"
    tls_server_name = "line-3"      # when the agent's certificate names another host

    [tokens]                        # management tokens for discovered agents,
    "jetson-01" = "..."             # keyed by agent id, name or HOST:PORT
    default = "..."                 # used when nothing more specific matches

    [tls]                           # TLS/mTLS for every agent without its own tls_* keys
    ca = "fleet-ca.pem"             # paths relative to this file; without ca: pinning
    cert = "console.pem"            # a client certificate (mTLS), with or without ca
    key = "console.key"
    server_name = "edge-agent"

    [fleet]                         # a fleet's MQTT broker: its agents listed beside the
    broker = "mqtts://broker:8883"  # mDNS ones (docs/fleet.md); or --broker
    group = "cams"                  # only this group (default: every group); or --fleet-group
    ca = "broker-ca.pem"            # the broker's CA (default: the system's)
    cert = "console.crt"            # a client certificate and key, or ...
    key = "console.key"
    username = "fleet-console"      # ... a username (password: $EDGE_MQTT_PASSWORD)
    allow_plaintext = false         # mqtt:// to another host than loopback
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from console.errors import ConsoleConfigError

DEFAULT_POLL_INTERVAL_S = 2.0
DEFAULT_CANARY_SOAK_S = 30.0


def default_config_path() -> Path:
    """Where the console looks for its config file when none is given."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "edge-console" / "config.toml"


def parse_address(text: str, *, where: str = "--agent") -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port), with a message naming ``where`` on a bad value."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConsoleConfigError(f"{where}: {text!r} is not HOST:PORT (e.g. 10.0.0.7:7070)")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class ChannelTlsFiles:
    """TLS for a management channel: the agent's CA (None: pin the agent's certificate) and,
    for mTLS, a client cert and key."""

    ca: Path | None
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None


@dataclass(frozen=True, slots=True)
class StaticAgent:
    """An agent listed by address (config file or ``--agent``), not only found by mDNS."""

    host: str
    port: int
    name: str = ""
    token: str | None = None
    tls: ChannelTlsFiles | None = None

    @property
    def address(self) -> str:
        """``HOST:PORT``."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """A fleet's MQTT broker whose agents the TUI lists (``[fleet]``, ``--broker``)."""

    url: str
    group: str | None = None  # None: every group
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    username: str | None = None  # the password comes from $EDGE_MQTT_PASSWORD
    allow_plaintext: bool = False


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """Everything the TUI needs to know before it starts."""

    agents: tuple[StaticAgent, ...] = ()
    tokens: Mapping[str, str] = field(default_factory=dict)
    default_token: str | None = None
    discovery: bool = True
    interfaces: tuple[str, ...] | None = None  # None: all interfaces
    read_only: bool = False
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    canary_soak_s: float = DEFAULT_CANARY_SOAK_S
    bundle_dir: Path | None = None  # where the deploy file picker starts
    tls: ChannelTlsFiles | None = None  # for every agent without TLS settings of its own
    insecure: bool = False  # plaintext to every agent (--insecure)
    accept_new: bool = False  # pin an agent's certificate at first contact without asking
    known_agents: Path | None = None  # the pins; None: known_agents beside the config file
    broker: BrokerSettings | None = None  # a fleet's MQTT broker (agents beside mDNS ones)
    state_dir: Path | None = None  # what the console remembers (last bundle folder); None: nothing
    # asked at a first contact when accept_new is off: (address, fingerprint, file) -> trust?
    ask_new: Callable[[str, str, Path], bool] | None = field(default=None, compare=False)

    def tls_for(self, address: str) -> ChannelTlsFiles | None:
        """TLS settings for the agent at ``address``: its own entry's, else the fleet's."""
        for agent in self.agents:
            if agent.address == address and agent.tls is not None:
                return agent.tls
        return self.tls

    def token_for(self, *, agent_id: str = "", name: str = "", address: str = "") -> str | None:
        """The token to present to an agent: static entry, then id, name, address, default."""
        for agent in self.agents:
            if agent.address == address and agent.token:
                return agent.token
        for key in (agent_id, name, address):
            if key and key in self.tokens:
                return self.tokens[key]
        return self.default_token

    def with_overrides(self, *, agents: Sequence[str] = (), interfaces: Sequence[str] | None = None,
                       discovery: bool | None = None, read_only: bool | None = None,
                       token: str | None = None, insecure: bool = False,
                       accept_new: bool = False) -> ConsoleSettings:
        """These settings with command-line values applied on top."""
        extra = tuple(StaticAgent(*parse_address(a), token=token) for a in agents)
        known = {a.address for a in self.agents}
        return replace(
            self,
            agents=self.agents + tuple(a for a in extra if a.address not in known),
            interfaces=_check_interfaces(interfaces, "--mdns-interface") if interfaces else
            self.interfaces,
            discovery=self.discovery if discovery is None else discovery,
            read_only=self.read_only or bool(read_only),
            default_token=self.default_token if token is None else token,
            insecure=self.insecure or insecure, accept_new=self.accept_new or accept_new)


def _check_interfaces(values: object, where: str) -> tuple[str, ...]:
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise ConsoleConfigError(f"{where}: expected a list of IPv4 addresses")
    for ip in values:
        try:
            if ipaddress.ip_address(ip).version != 4:
                raise ValueError
        except ValueError:
            raise ConsoleConfigError(
                f"{where}: {ip!r} is not an IPv4 address; give the address of the interface "
                "to browse on (e.g. 192.168.1.20)") from None
    return tuple(values)


def _read_token_file(raw: object, where: str, base: Path) -> str:
    if not isinstance(raw, str):
        raise ConsoleConfigError(f"{where}: token_file must be a path")
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else base / path
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConsoleConfigError(f"{where}: cannot read token file {path}: "
                                 f"{exc.strerror or exc}") from exc
    if not token:
        raise ConsoleConfigError(f"{where}: token file {path} is empty")
    return token


def _tls_files(table: Mapping[str, object], prefix: str, where: str,
               base: Path) -> ChannelTlsFiles | None:
    """``ca``/``cert``/``key``/``server_name`` (each with ``prefix``) from a TOML table."""
    keys = {k: f"{prefix}{k}" for k in ("ca", "cert", "key", "server_name")}
    if not any(k in table for k in keys.values()):
        return None

    def path_of(name: str) -> Path | None:
        raw = table.get(keys[name])
        if raw is None:
            return None
        if not isinstance(raw, str):
            raise ConsoleConfigError(f"{where}: {keys[name]} must be a file path")
        path = Path(raw).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise ConsoleConfigError(f"{where}: {keys[name]} file {path} does not exist")
        return path

    ca = path_of("ca")
    cert, key = path_of("cert"), path_of("key")
    if (cert is None) != (key is None):
        raise ConsoleConfigError(f"{where}: give both {keys['cert']} and {keys['key']} "
                                 "(a client certificate for mTLS) or neither")
    if ca is None and cert is None:
        raise ConsoleConfigError(f"{where}: {keys['ca']} (the CA that signed the agents' "
                                 f"certificates) or {keys['cert']} + {keys['key']} (a client "
                                 "certificate, with pinned agent certificates) is required "
                                 "with TLS settings")
    server_name = table.get(keys["server_name"])
    if server_name is not None and not isinstance(server_name, str):
        raise ConsoleConfigError(f"{where}: {keys['server_name']} must be a host name")
    return ChannelTlsFiles(ca=ca, cert=cert, key=key, server_name=server_name)


def _number(data: Mapping[str, object], key: str, default: float, path: Path) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConsoleConfigError(f"{path}: {key} must be a positive number of seconds")
    return float(value)


def parse_settings(data: Mapping[str, object], path: Path) -> ConsoleSettings:
    """Settings from the parsed TOML of ``path`` (used for messages and relative paths)."""
    known = {"read_only", "poll_interval_s", "canary_soak_s", "discovery", "agents", "tokens",
             "bundle_dir", "tls", "insecure", "known_agents", "fleet"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConsoleConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; known keys: "
                                 f"{', '.join(sorted(known))}")
    disc = data.get("discovery", {})
    if not isinstance(disc, dict):
        raise ConsoleConfigError(f"{path}: [discovery] must be a table")
    interfaces = disc.get("interfaces")
    agents: list[StaticAgent] = []
    raw_agents = data.get("agents", [])
    if not isinstance(raw_agents, list):
        raise ConsoleConfigError(f"{path}: agents must be an array of tables ([[agents]])")
    for i, entry in enumerate(raw_agents):
        where = f"{path}: agents[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("address"), str):
            raise ConsoleConfigError(f"{where}: needs address = \"HOST:PORT\"")
        host, port = parse_address(entry["address"], where=where)
        token = entry.get("token")
        if "token_file" in entry:
            token = _read_token_file(entry["token_file"], where, path.parent)
        if token is not None and not isinstance(token, str):
            raise ConsoleConfigError(f"{where}: token must be a string")
        agents.append(StaticAgent(host, port, str(entry.get("name", "")), token,
                                  _tls_files(entry, "tls_", where, path.parent)))
    tokens = data.get("tokens", {})
    if not isinstance(tokens, dict) or not all(isinstance(v, str) for v in tokens.values()):
        raise ConsoleConfigError(f"{path}: [tokens] maps agent id/name/HOST:PORT to a string")
    tokens = dict(tokens)
    default_token = tokens.pop("default", None)
    bundle_dir = data.get("bundle_dir")
    known_agents = data.get("known_agents")
    if known_agents is not None and not isinstance(known_agents, str):
        raise ConsoleConfigError(f"{path}: known_agents must be a file path")
    insecure = data.get("insecure", False)
    if not isinstance(insecure, bool):
        raise ConsoleConfigError(f"{path}: insecure must be true or false")
    tls_table = data.get("tls", {})
    if not isinstance(tls_table, dict):
        raise ConsoleConfigError(f"{path}: [tls] must be a table (ca, cert, key, server_name)")
    return ConsoleSettings(
        broker=_broker(data.get("fleet"), path),
        tls=_tls_files(tls_table, "", f"{path}: [tls]", path.parent),
        agents=tuple(agents), tokens=tokens, default_token=default_token,
        discovery=bool(disc.get("enabled", True)),
        interfaces=None if interfaces is None else _check_interfaces(
            interfaces, f"{path}: discovery.interfaces"),
        read_only=bool(data.get("read_only", False)),
        poll_interval_s=_number(data, "poll_interval_s", DEFAULT_POLL_INTERVAL_S, path),
        canary_soak_s=_number(data, "canary_soak_s", DEFAULT_CANARY_SOAK_S, path),
        bundle_dir=Path(str(bundle_dir)).expanduser() if bundle_dir else None,
        insecure=insecure, known_agents=path.parent / Path(known_agents).expanduser()
        if known_agents else None)


def _broker(table: object, path: Path) -> BrokerSettings | None:
    """``[fleet]``: the broker's URL (checked when it connects), a group, credentials."""
    if table is None:
        return None
    where = f"{path}: [fleet]"
    if not isinstance(table, dict) or not isinstance(table.get("broker"), str):
        raise ConsoleConfigError(f"{where}: needs broker = \"mqtts://HOST:8883\"")
    unknown = sorted(set(table) - {"broker", "group", "ca", "cert", "key", "username",
                                   "allow_plaintext"})
    if unknown:
        raise ConsoleConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    files = {}
    for name in ("ca", "cert", "key"):
        raw = table.get(name)
        if raw is None:
            continue
        file = Path(str(raw)).expanduser()
        file = file if file.is_absolute() else path.parent / file
        if not file.is_file():
            raise ConsoleConfigError(f"{where}: {name} file {file} does not exist")
        files[name] = file
    if ("cert" in files) != ("key" in files):
        raise ConsoleConfigError(f"{where}: cert and key go together")
    group, username = table.get("group"), table.get("username")
    if not isinstance(table.get("allow_plaintext", False), bool):
        raise ConsoleConfigError(f"{where}: allow_plaintext must be true or false")
    return BrokerSettings(table["broker"], None if group is None else str(group),
                          username=None if username is None else str(username),
                          allow_plaintext=bool(table.get("allow_plaintext", False)), **files)


def load_settings(path: Path | None = None) -> ConsoleSettings:
    """Settings from ``path`` (or the default path; missing default file: defaults)."""
    explicit = path is not None
    path = path or default_config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        if explicit:
            raise ConsoleConfigError(f"config file {path} does not exist") from None
        return ConsoleSettings(state_dir=path.parent)
    except OSError as exc:
        raise ConsoleConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConsoleConfigError(f"{path}: not valid TOML: {exc}") from exc
    return replace(parse_settings(data, path), state_dir=path.parent)
