"""The [management], [mdns] and [metrics] sections of agent.toml, with the serve flags on top.

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edge_agent.errors import ConfigError
from edge_agent.settings import (
    ManagementOptions,
    RegistrySettings,
    TlsFiles,
    ipv4_interfaces,
    parse_address,
)

SECTIONS = ("management", "mdns", "metrics", "registry")
_MGMT_EXAMPLE = "0.0.0.0:50051"
_MGMT_KEYS = {"address", "name", "trust", "allow_unsigned", "profile", "keep_versions",
              "watch_window_s", "error_threshold", "min_requests", "tls_cert", "tls_key",
              "tls_client_ca", "insecure", "connection_idle_s", "handshake_timeout_s"}


def _table(data: Mapping[str, Any], key: str, known: set[str]) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"config key '{key}': expected a table ([{key}])")
    for k in value:
        if k not in known:
            raise ConfigError(f"config key '{key}.{k}' is unknown; known keys: {sorted(known)}")
    return value


def _typed(key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ConfigError(f"config key '{key}': expected a number, got {value!r}")
    if not isinstance(value, kind):
        raise ConfigError(f"config key '{key}': expected {getattr(kind, '__name__', kind)}, "
                          f"got {value!r}")
    return value


def management_options(data: Mapping[str, Any], base_dir: Path | None = None, *,
                       address: str | None = None, name: str | None = None,
                       trust: Sequence[Path] = (), allow_unsigned: bool = False,
                       mdns_interfaces: Sequence[str] = (), no_mdns: bool = False,
                       no_metrics: bool = False, profile: str | None = None,
                       insecure: bool = False, registry_allow: Sequence[str] = (),
                       registry_insecure: bool = False, registry_ca_file: Path | None = None,
                       registry_auth_file: Path | None = None) -> ManagementOptions:
    """ManagementOptions from the parsed TOML ``data`` with the flags (when given) on top."""
    mg = _table(data, "management", _MGMT_KEYS)
    md = _table(data, "mdns", {"enabled", "interfaces"})
    mt = _table(data, "metrics", {"enabled"})
    rg = _table(data, "registry", {"allow", "insecure", "auth_file", "ca_file", "retries"})

    def path(key: str, value: Any) -> Path:
        p = Path(_typed(key, value, str)).expanduser()
        return p if p.is_absolute() or base_dir is None else base_dir / p

    kw: dict[str, Any] = {}
    if "address" in mg:
        kw["address"] = parse_address(_typed("management.address", mg["address"], str),
                                      "config key 'management.address'", _MGMT_EXAMPLE)
    for key in ("name", "profile"):
        if key in mg:
            kw[key] = _typed(f"management.{key}", mg[key], str)
    if "trust" in mg:
        kw["trusted_keys"] = tuple(path("management.trust", p)
                                   for p in _typed("management.trust", mg["trust"], list))
    if "allow_unsigned" in mg:
        kw["allow_unsigned"] = _typed("management.allow_unsigned", mg["allow_unsigned"], bool)
    for key, kind in (("keep_versions", int), ("min_requests", int),
                      ("watch_window_s", (int, float)), ("error_threshold", (int, float)),
                      ("connection_idle_s", (int, float)),
                      ("handshake_timeout_s", (int, float))):
        if key in mg:
            value = _typed(f"management.{key}", mg[key], kind)
            if value < 0 or (key == "keep_versions" and value < 1):
                raise ConfigError(f"config key 'management.{key}': {value} is out of range")
            kw[key] = value
    if "tls_cert" in mg or "tls_key" in mg:
        if "tls_cert" not in mg or "tls_key" not in mg:
            raise ConfigError("config keys 'management.tls_cert' and 'management.tls_key' go "
                              "together")
        kw["tls"] = TlsFiles(cert=path("management.tls_cert", mg["tls_cert"]),
                             key=path("management.tls_key", mg["tls_key"]),
                             client_ca=path("management.tls_client_ca", mg["tls_client_ca"])
                             if "tls_client_ca" in mg else None)
    elif "tls_client_ca" in mg:  # client certificates, the agent's own self-signed cert
        kw["client_ca"] = path("management.tls_client_ca", mg["tls_client_ca"])
    if "insecure" in mg:
        kw["insecure"] = _typed("management.insecure", mg["insecure"], bool)
    if "enabled" in md:
        kw["mdns"] = _typed("mdns.enabled", md["enabled"], bool)
    if "interfaces" in md:
        kw["mdns_interfaces"] = ipv4_interfaces(_typed("mdns.interfaces", md["interfaces"], list),
                                            "config key 'mdns.interfaces'")
    if "enabled" in mt:
        kw["metrics"] = _typed("metrics.enabled", mt["enabled"], bool)
    if rg:
        kw["registry"] = _registry(rg, path)
    options = ManagementOptions(**kw)
    flags: dict[str, Any] = {}
    if address is not None:
        flags["address"] = parse_address(address, "--management", _MGMT_EXAMPLE)
    if name is not None:
        flags["name"] = name
    if trust:
        flags["trusted_keys"] = options.trusted_keys + tuple(Path(p) for p in trust)
    if allow_unsigned:
        flags["allow_unsigned"] = True
    if mdns_interfaces:
        flags["mdns_interfaces"] = ipv4_interfaces(mdns_interfaces, "--mdns-interface")
    if no_mdns:
        flags["mdns"] = False
    if no_metrics:
        flags["metrics"] = False
    if profile is not None:
        flags["profile"] = profile
    if insecure:
        flags["insecure"] = True
    if registry_allow or registry_insecure or registry_ca_file or registry_auth_file:
        flags["registry"] = _registry_flags(options.registry, registry_allow, registry_insecure,
                                            registry_ca_file, registry_auth_file)
    options = dataclasses.replace(options, **flags)
    if options.insecure and (options.tls is not None or options.client_ca is not None):
        raise ConfigError("--insecure (management.insecure) turns TLS off, but TLS files are "
                          "configured (management.tls_cert / tls_client_ca); drop one of them")
    check_trusted_keys(options.trusted_keys)
    return options


def _registry(rg: Mapping[str, Any], path: Any) -> RegistrySettings:
    """``[registry]``, every entry checked now (a bad one would refuse every deploy later)."""
    from packager.bundle.errors import PackagerError
    from packager.bundle.oci.ref import RegistryPolicy

    def strings(key: str) -> tuple[str, ...]:
        values = _typed(f"registry.{key}", rg.get(key, []), list)
        for v in values:
            if not isinstance(v, str):
                raise ConfigError(f"config key 'registry.{key}': {v!r} is not a string")
        return tuple(values)

    allow, insecure = strings("allow"), strings("insecure")
    try:
        RegistryPolicy.parse(allow, insecure)
    except PackagerError as exc:
        raise ConfigError(f"config key {exc}") from None
    retries = _typed("registry.retries", rg.get("retries", 4), int)
    if not 0 <= retries <= 20:
        raise ConfigError(f"config key 'registry.retries': {retries} is out of range (0-20)")
    auth = path("registry.auth_file", rg["auth_file"]) if "auth_file" in rg else None
    ca = path("registry.ca_file", rg["ca_file"]) if "ca_file" in rg else None
    if ca is not None and not ca.is_file():
        raise ConfigError(f"config key 'registry.ca_file': {ca} is not a file")
    return RegistrySettings(allow=allow, insecure=insecure, auth_file=auth, ca_file=ca,
                            retries=retries)


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
