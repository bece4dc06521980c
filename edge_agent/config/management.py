"""The [management], [mdns], [metrics] and [registry] sections of agent.toml, with the serve
flags on top, parsed into the sections of their domains: the management API
(:class:`ManagementConfig`), the deploy lifecycle (:class:`~edge_agent.config.deploy.
ManagerSettings`: trust, retention, the watch after a deploy, the profile), discovery
(:class:`DiscoveryConfig`), metrics (:class:`MetricsConfig`) and the registries
(:class:`RegistrySettings`).

::

    [management]
    address = "0.0.0.0:50051"       # --management HOST:PORT (unset or "": no management API)
    name = "line-3"                 # --name
    trust = ["edge-pack.pub"]       # --trust PUBKEY (repeatable; relative to the file)
    allow_unsigned = false          # --allow-unsigned
    profile = "x86_64-cpu-openvino" # --profile (default: detected)
    keep_versions = 3
    watch_window_s = 60
    error_threshold = 0.5
    min_requests = 20
    # TLS is on by default: a self-signed certificate created in STATE_DIR/tls/ (consoles pin
    # its fingerprint). Your own certificate instead (tls_cert + tls_key), and/or client
    # certificates signed by tls_client_ca (mTLS: they replace the token).
    tls_cert = "agent.pem"
    tls_key = "agent.key"
    tls_client_ca = "ca.pem"
    insecure = false                # --insecure: plaintext (trusted networks and tests only)
    # The port's own accept loop (issue 27): a connection counts as authenticated from its
    # first call with the right token (or client certificate); the others are capped per
    # address and closed when late, and give way to new ones when the port is full.
    max_connections = 256           # connections held at once
    max_connections_per_peer = 32   # ... from one address (beyond: refused, saying why)
    max_unauthenticated_per_peer = 8  # ... from one address without an authenticated call yet
    handshake_timeout_s = 5         # to finish the TLS handshake (HTTP/2 preface: plaintext)
    auth_timeout_s = 30             # to make a first authenticated call
    connection_idle_s = 300         # an authenticated connection without calls (0: never)

    [mdns]
    enabled = true                  # --no-mdns
    interfaces = ["192.168.1.20"]   # --mdns-interface IP (repeatable)

    [metrics]
    enabled = true                  # --no-metrics

    [registry]                      # deploy by reference (edge-console deploy oci://...)
    allow = ["registry.local:5000/models"]  # --registry-allow (repeatable, added to these);
                                            # host[:port]/prefix; empty: refuse every reference
    insecure = ["registry.local:5000"]      # plain-HTTP lab registries (--registry-insecure:
                                            # the registries of --registry-allow)
    auth_file = "registry-auth.json"        # --registry-auth-file; docker-style config.json
    ca_file = "factory-ca.pem"              # --registry-ca-file; a private CA (PEM)
    retries = 4                     # per failed request / cut download (resumed)
    pull_timeout_s = 600            # a whole pull (manifests and layer) ends by then: refused
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.config.deploy import ManagerSettings
from edge_agent.config.fields import (
    Key,
    address,
    boolean,
    in_range,
    ipv4_interfaces,
    parse_address,
    parse_table,
    path_under,
    string,
    strings,
)
from edge_agent.errors import ConfigError

SECTIONS = ("management", "mdns", "metrics", "registry")
_MGMT_EXAMPLE = "0.0.0.0:50051"


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
    pull_timeout_s: float = 600.0
    """The whole pull of one deploy by reference (manifests and the layer, retries
    included) ends by then, refused; besides the 30 s per connect and per read."""


@dataclass(frozen=True)
class ConnectionLimits:
    """What the management port's accept loop (:mod:`edge_agent.management.gate`) allows: a
    connection is *unauthenticated* until its first call with the right token (with mTLS: until
    its TLS handshake is done). Timeouts of 0 mean none."""

    max_connections: int = 256
    """Connections held at once; a new one beyond it closes the oldest unauthenticated
    connection of the address holding most of them (refused when all are authenticated)."""
    max_connections_per_peer: int = 32
    max_unauthenticated_per_peer: int = 8
    handshake_timeout_s: float = 5.0
    """To finish the TLS handshake (plaintext: to send the HTTP/2 preface)."""
    auth_timeout_s: float = 30.0
    """From accept to the first authenticated call."""


@dataclass(frozen=True)
class ManagementConfig:
    """``[management]``'s API keys: where and how the management API listens."""

    address: str | None = None  # None: no management API (and no mDNS advert)
    name: str = field(default_factory=socket.gethostname)
    tls: TlsFiles | None = None  # your own certificate; None: the self-signed one in STATE_DIR/tls
    client_ca: Path | None = None  # mTLS with the self-signed certificate
    insecure: bool = False  # plaintext management API (--insecure)
    connection_idle_s: float = 300.0  # a management connection without calls is closed (0: never)
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)


@dataclass(frozen=True)
class DiscoveryConfig:
    """``[mdns]``: the agent's mDNS advert (only while the management API is on)."""

    enabled: bool = True
    interfaces: tuple[str, ...] = ()  # empty: every interface


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``: the metrics store and its recorder."""

    enabled: bool = True


@dataclass(frozen=True)
class ManagementSections:
    """What ``[management]``, ``[mdns]``, ``[metrics]`` and ``[registry]`` (with the serve
    flags on top) configure, by domain; :class:`~edge_agent.config.AgentConfig` holds each."""

    management: ManagementConfig = field(default_factory=ManagementConfig)
    deploy: ManagerSettings = field(default_factory=ManagerSettings)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    registry: RegistrySettings = field(default_factory=RegistrySettings)


_DEPLOY_FIELDS = {f.name for f in dataclasses.fields(ManagerSettings)}
_LIMIT_FIELDS = {f.name for f in dataclasses.fields(ConnectionLimits)}


def _management_keys(path: Callable[[str, Any], Path]) -> tuple[Key, ...]:
    number = (int, float)
    return (
        Key("address", address(_MGMT_EXAMPLE)),
        Key("name", string),
        Key("profile", string),
        Key("trust", lambda k, v: tuple(path(k, p) for p in strings(k, v)), "trusted_keys"),
        Key("allow_unsigned", boolean),
        Key("keep_versions", in_range(int, 1)),
        Key("min_requests", in_range(int, 0)),
        Key("watch_window_s", in_range(number, 0)),
        Key("error_threshold", in_range(number, 0)),
        Key("connection_idle_s", in_range(number, 0)),
        Key("handshake_timeout_s", in_range(number, 0)),
        Key("auth_timeout_s", in_range(number, 0)),
        Key("max_connections", in_range(int, 1, 65536)),
        Key("max_connections_per_peer", in_range(int, 1, 65536)),
        Key("max_unauthenticated_per_peer", in_range(int, 1, 65536)),
        Key("tls_cert", path),
        Key("tls_key", path),
        Key("tls_client_ca", path),
        Key("insecure", boolean),
    )


_MDNS_KEYS = (
    Key("enabled", boolean),
    Key("interfaces", lambda k, v: ipv4_interfaces(strings(k, v), f"config key '{k}'")),
)
_METRICS_KEYS = (Key("enabled", boolean),)


def management_sections(data: Mapping[str, Any], base_dir: Path | None = None, *,
                        address: str | None = None, name: str | None = None,
                        trust: Sequence[Path] = (), allow_unsigned: bool = False,
                        mdns_interfaces: Sequence[str] = (), no_mdns: bool = False,
                        no_metrics: bool = False, profile: str | None = None,
                        insecure: bool = False, registry_allow: Sequence[str] = (),
                        registry_insecure: bool = False, registry_ca_file: Path | None = None,
                        registry_auth_file: Path | None = None) -> ManagementSections:
    """The management-side sections from the parsed TOML ``data`` with the flags (when given)
    on top; relative paths in the file are taken relative to ``base_dir``."""
    path = path_under(base_dir)
    kw = parse_table("management", data.get("management", {}), _management_keys(path))
    deploy = ManagerSettings(**{k: kw.pop(k) for k in list(kw) if k in _DEPLOY_FIELDS})
    cert, key, client_ca = kw.pop("tls_cert", None), kw.pop("tls_key", None), \
        kw.pop("tls_client_ca", None)
    if (cert is None) != (key is None):
        raise ConfigError("config keys 'management.tls_cert' and 'management.tls_key' go "
                          "together")
    if cert is not None and key is not None:
        kw["tls"] = TlsFiles(cert=cert, key=key, client_ca=client_ca)
    elif client_ca is not None:  # client certificates, the agent's own self-signed cert
        kw["client_ca"] = client_ca
    limits = ConnectionLimits(**{k: kw.pop(k) for k in list(kw) if k in _LIMIT_FIELDS})
    if limits.max_unauthenticated_per_peer > limits.max_connections_per_peer:
        raise ConfigError("config key 'management.max_unauthenticated_per_peer' "
                          f"({limits.max_unauthenticated_per_peer}) is more than "
                          f"'management.max_connections_per_peer' "
                          f"({limits.max_connections_per_peer}); lower it or raise the other")
    api = ManagementConfig(**kw, limits=limits)
    discovery = DiscoveryConfig(**parse_table("mdns", data.get("mdns", {}), _MDNS_KEYS))
    metrics = MetricsConfig(**parse_table("metrics", data.get("metrics", {}), _METRICS_KEYS))
    registry = _registry(data["registry"], path) if data.get("registry") else RegistrySettings()
    if address is not None or name is not None or insecure:
        api = dataclasses.replace(
            api, address=api.address if address is None else parse_address(
                address, "--management", _MGMT_EXAMPLE),
            name=api.name if name is None else name, insecure=api.insecure or insecure)
    deploy = dataclasses.replace(
        deploy, trusted_keys=deploy.trusted_keys + tuple(Path(p) for p in trust),
        allow_unsigned=deploy.allow_unsigned or allow_unsigned,
        profile=deploy.profile if profile is None else profile)
    if mdns_interfaces:
        discovery = dataclasses.replace(
            discovery, interfaces=ipv4_interfaces(mdns_interfaces, "--mdns-interface"))
    if no_mdns:
        discovery = dataclasses.replace(discovery, enabled=False)
    if no_metrics:
        metrics = MetricsConfig(enabled=False)
    if registry_allow or registry_insecure or registry_ca_file or registry_auth_file:
        registry = _registry_flags(registry, registry_allow, registry_insecure,
                                   registry_ca_file, registry_auth_file)
    if api.insecure and (api.tls is not None or api.client_ca is not None):
        raise ConfigError("--insecure (management.insecure) turns TLS off, but TLS files are "
                          "configured (management.tls_cert / tls_client_ca); drop one of them")
    check_trusted_keys(deploy.trusted_keys)
    return ManagementSections(management=api, deploy=deploy, discovery=discovery,
                              metrics=metrics, registry=registry)


def _registry(data: Any, path: Callable[[str, Any], Path]) -> RegistrySettings:
    """``[registry]``, every entry checked now (a bad one would refuse every deploy later)."""
    from packager.bundle.errors import PackagerError
    from packager.bundle.oci.ref import RegistryPolicy

    kw = parse_table("registry", data, (
        Key("allow", strings), Key("insecure", strings), Key("auth_file", path),
        Key("ca_file", path), Key("retries", in_range(int, 0, 20)),
        Key("pull_timeout_s", in_range((int, float), 1, 86400))))
    settings = RegistrySettings(**kw)
    try:
        RegistryPolicy.parse(settings.allow, settings.insecure)
    except PackagerError as exc:
        raise ConfigError(f"config key {exc}") from None
    if settings.ca_file is not None and not settings.ca_file.is_file():
        raise ConfigError(f"config key 'registry.ca_file': {settings.ca_file} is not a file")
    return settings


def _registry_flags(base: RegistrySettings, allow: Sequence[str], insecure: bool,
                    ca_file: Path | None, auth_file: Path | None) -> RegistrySettings:
    """``[registry]`` with the serve flags on top: ``--registry-allow`` entries added to the
    file's, ``--registry-insecure`` (plain HTTP to the registries of those entries), and
    ``--registry-ca-file`` / ``--registry-auth-file`` replacing the file's."""
    from packager.bundle.errors import PackagerError
    from packager.bundle.oci.ref import parse_allow_entry

    try:
        entries = [parse_allow_entry(a, "--registry-allow") for a in allow]
    except PackagerError as exc:
        raise ConfigError(str(exc)) from None
    plain: tuple[str, ...] = ()
    if insecure:
        if not entries:
            raise ConfigError("--registry-insecure makes the registries of --registry-allow "
                              "plain HTTP; give --registry-allow HOST[:PORT]/PREFIX too (or "
                              "list the registry in [registry] insecure)")
        plain = tuple(e.registry for e in entries)
    if ca_file is not None and not ca_file.is_file():
        raise ConfigError(f"--registry-ca-file: {ca_file} is not a file")
    return dataclasses.replace(
        base, allow=_merged(base.allow, allow), insecure=_merged(base.insecure, plain),
        ca_file=ca_file or base.ca_file, auth_file=auth_file or base.auth_file)


def _merged(first: Sequence[str], more: Sequence[str]) -> tuple[str, ...]:
    """``first`` then the entries of ``more`` not already in it (order kept)."""
    return tuple(dict.fromkeys([*first, *more]))


def check_trusted_keys(paths: Sequence[Path]) -> None:
    """Refuse at start what would refuse every deploy later: a --trust that is missing, a
    directory, a private key or not an Ed25519 public key."""
    from packager.bundle.errors import KeyFileError
    from packager.bundle.signing import load_public_key

    for key in paths:
        if not key.exists():
            raise ConfigError(f"trusted public key {key} does not exist (--trust / "
                              "management.trust)")
        if key.is_dir():
            raise ConfigError(f"--trust: {key} is a directory; give the public key file in it "
                              "(the .pub written by `edge-pack keygen`)")
        try:
            load_public_key(key)
        except KeyFileError as exc:
            raise ConfigError(f"--trust: {exc}") from None
