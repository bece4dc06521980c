"""agent.toml's [management], [mdns] and [metrics] sections and the serve flags over them."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from edge_agent.config.management import management_sections
from edge_agent.errors import ConfigError
from packager.bundle.signing import generate_keypair

TOML = """
[management]
address = "0.0.0.0:6000"
name = "line-3"
trust = ["keys/release.pub"]
keep_versions = 2
watch_window_s = 30
error_threshold = 0.25
tls_cert = "agent.pem"
tls_key = "agent.key"
tls_client_ca = "ca.pem"

[mdns]
interfaces = ["192.168.1.20"]

[metrics]
enabled = false
"""


def _public_key(path: Path) -> Path:
    """A real Ed25519 public key written at ``path`` (the private one next to it)."""
    _, pub = generate_keypair(path.parent / f".{path.stem}-pair")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pub.read_bytes())
    return path


def test_sections_parse_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    _public_key(tmp_path / "keys" / "release.pub")
    opts = management_sections(tomllib.loads(TOML), tmp_path)
    api, deploy = opts.management, opts.deploy
    assert api.address == "0.0.0.0:6000" and api.name == "line-3"
    assert deploy.trusted_keys == (tmp_path / "keys" / "release.pub",)
    assert (deploy.keep_versions, deploy.watch_window_s, deploy.error_threshold) == (2, 30, 0.25)
    assert api.tls is not None and api.tls.client_ca == tmp_path / "ca.pem"
    assert opts.discovery.interfaces == ("192.168.1.20",) and opts.metrics.enabled is False


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    _public_key(tmp_path / "keys" / "release.pub")
    extra = _public_key(tmp_path / "dev.pub")
    opts = management_sections(tomllib.loads(TOML), tmp_path, address="127.0.0.1:0",
                               name="bench", trust=[extra], allow_unsigned=True,
                               mdns_interfaces=["127.0.0.1"], no_mdns=True)
    assert opts.management.address == "127.0.0.1:0" and opts.management.name == "bench"
    assert opts.deploy.trusted_keys[-1] == extra and len(opts.deploy.trusted_keys) == 2
    assert opts.deploy.allow_unsigned and not opts.discovery.enabled
    assert opts.discovery.interfaces == ("127.0.0.1",)
    assert management_sections({}, None, address="none").management.address is None


@pytest.mark.parametrize(("data", "message"), [
    ({"management": {"adress": "x"}}, "management.adress' is unknown"),
    ({"management": {"keep_versions": 0}}, "out of range"),
    ({"management": {"allow_unsigned": "yes"}}, "expected bool"),
    ({"management": {"address": "nowhere"}}, "HOST:PORT"),
    ({"management": {"tls_cert": "a.pem"}}, "go together"),
    ({"mdns": {"interfaces": ["eth0"]}}, "not an IPv4 address"),
    ({"management": {"trust": ["missing.pub"]}}, "does not exist"),
])
def test_mistakes_are_named(tmp_path: Path, data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        management_sections(data, tmp_path)


def test_a_trust_that_is_not_a_public_key_is_refused_at_start(tmp_path: Path) -> None:
    private, public = generate_keypair(tmp_path / "keys")
    junk = tmp_path / "notes.txt"
    junk.write_text("not a key\n")
    for path, message in ((private, "is a private key; give the public key"),
                          (tmp_path / "keys", "is a directory"),
                          (junk, "is not a PEM public key")):
        with pytest.raises(ConfigError, match=message) as err:
            management_sections({}, tmp_path, trust=[path])
        assert str(err.value).startswith("--trust: ") and str(err.value).count(str(path)) == 1
    assert management_sections({}, tmp_path, trust=[public]).deploy.trusted_keys == (public,)
