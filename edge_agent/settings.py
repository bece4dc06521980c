"""The agent's settings as plain values: a leaf module that imports nothing of the agent's
machinery (no gRPC, zeroconf, SQLite or runtime), so that a client reading or writing an
``agent.toml`` (``edge_agent.config``) stays light.

:mod:`edge_agent.config` parses ``agent.toml`` into these; :mod:`edge_agent.management.runtime`
and :mod:`edge_agent.management.server` act on them.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edge_agent.errors import ConfigError

ISOLATION_MODES = ("auto", "process", "thread")
"""``process``: each instance in a runtime process of its own (edge_agent.backends.isolated);
``thread``: in the agent's process; ``auto``: a process for backends that cannot cancel a
running inference (``Cancellation.NONE``: OpenVINO, TensorRT), the agent's process for the
others (ONNX Runtime)."""


RESPONSE_CACHE_UNIT = 1 << 20
"""``[response_cache] size_mib`` is in MiB: the agent-wide byte budget of the response cache
(edge_agent.core.cache; 0, the default, means no cache). Models opt in one by one with
``[models.NAME] response_cache = true``."""


@dataclass(frozen=True)
class TlsFiles:
    """Server certificate and key (PEM), and the CA that signs client certificates (mTLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass(frozen=True)
class RegistrySettings:
    """``[registry]``: where deploys by reference may pull from (``allow``: entries
    ``host[:port]/prefix``; empty refuses every reference), which registries speak plain
    HTTP (``insecure``: ``host:port``), and the agent's own credentials (``auth_file``: a
    docker-style config.json). Entries are checked when the config is read."""

    allow: tuple[str, ...] = ()
    insecure: tuple[str, ...] = ()
    auth_file: Path | None = None
    ca_file: Path | None = None  # trust this CA bundle (PEM) for registries' TLS certificates
    retries: int = 4
    """How often a failed registry request or a cut download is tried again (resumed)."""


@dataclass(frozen=True)
class ManagementOptions:
    """The management side of the agent (config sections [management], [mdns], [metrics])."""

    address: str | None = None  # None: no management API (and no mDNS advert)
    name: str = field(default_factory=socket.gethostname)
    trusted_keys: tuple[Path, ...] = ()
    allow_unsigned: bool = False
    keep_versions: int = 3
    watch_window_s: float = 60.0
    error_threshold: float = 0.5
    min_requests: int = 20
    tls: TlsFiles | None = None  # your own certificate; None: the self-signed one in STATE_DIR/tls
    client_ca: Path | None = None  # mTLS with the self-signed certificate
    insecure: bool = False  # plaintext management API (--insecure)
    connection_idle_s: float = 300.0  # a management connection without calls is closed (0: never)
    handshake_timeout_s: float = 10.0  # one that does not finish TLS/HTTP/2 setup is closed
    mdns: bool = True
    mdns_interfaces: tuple[str, ...] = ()  # empty: every interface
    metrics: bool = True
    profile: str | None = None
    registry: RegistrySettings = field(default_factory=RegistrySettings)


def parse_address(value: str, where: str, example: str = "127.0.0.1:8001") -> str | None:
    """Validate HOST:PORT (port 0 = any free port); "", "none" or "off" mean no listener (None).

    ``where`` names the setting in the ConfigError (a config key or a flag)."""
    if value.strip().lower() in ("", "none", "off"):
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{where}: expected HOST:PORT (e.g. {example}), got {value!r}")
    return value


def ipv4_interfaces(values: Sequence[str], where: str) -> tuple[str, ...]:
    """``values`` as a tuple, each checked to be an IPv4 address (ConfigError naming ``where``)."""
    for ip in values:
        try:
            if ipaddress.ip_address(ip).version != 4:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{where}: {ip!r} is not an IPv4 address; give the address of "
                              "an interface to advertise on (e.g. 192.168.1.20)") from None
    return tuple(values)
