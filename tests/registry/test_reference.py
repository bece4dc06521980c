"""OCI reference and allow-list parsing: strict, one-line errors (no network)."""

from __future__ import annotations

import pytest

from packager.bundle.oci.ref import (
    OciReferenceError,
    RegistryNotAllowedError,
    RegistryPolicy,
    parse_allow_entry,
    parse_reference,
)

DIGEST = "sha256:" + "ab" * 32


def test_good_references() -> None:
    r = parse_reference("oci://registry.local:5000/models/mlp:3")
    assert (r.host, r.port, r.repository, r.tag, r.digest) == (
        "registry.local", 5000, "models/mlp", "3", None)
    assert r.registry == "registry.local:5000" and r.reference == "3"
    p = parse_reference(f"oci://ghcr.io/acme/edge/mlp@{DIGEST}")
    assert p.port is None and p.reference == DIGEST
    assert str(p) == f"oci://ghcr.io/acme/edge/mlp@{DIGEST}" == p.pinned()
    both = parse_reference(f"oci://127.0.0.1:5000/a/b:1@{DIGEST}")
    assert both.tag == "1" and both.reference == DIGEST
    assert parse_reference(str(both)) == both


@pytest.mark.parametrize("text, says", [
    ("registry.local/mlp:1", "not an OCI reference"),
    ("oci://registry.local:5000/mlp", "no tag or digest"),
    ("oci://registry.local:5000", "no repository"),
    ("oci://registry.local:99999/mlp:1", "port"),
    ("oci://registry.local:50a/mlp:1", "port"),
    ("oci://-bad.host/mlp:1", "host"),
    ("oci://host/Mlp:1", "lowercase"),
    ("oci://host/a//b:1", "lowercase"),
    ("oci://host/../b:1", "lowercase"),
    ("oci://host/a:-x", "tag"),
    ("oci://host/a@sha256:abc", "digest"),
    ("oci://host/a@md5:" + "a" * 32, "digest"),
    ("oci://host/a:1?x=y", "not allowed"),
    ("oci://host/a:1\n", "no spaces"),
    ("oci://h\u00f6st/a:1", "no spaces"),
    ("oci://host/" + "a" * 2000 + ":1", "at most"),
])
def test_bad_references_say_why(text: str, says: str) -> None:
    with pytest.raises(OciReferenceError, match=says) as err:
        parse_reference(text)
    assert "\n" not in str(err.value)


def test_allow_list() -> None:
    policy = RegistryPolicy.parse(["registry.local:5000/models", "ghcr.io/acme"],
                                  ["registry.local:5000"])
    policy.check(parse_reference("oci://registry.local:5000/models/mlp:1"))
    policy.check(parse_reference("oci://registry.local:5000/models:1"))
    policy.check(parse_reference("oci://ghcr.io/acme/x/y:1"))
    for refused in ("oci://registry.local:5000/modelsx/mlp:1",  # a prefix is a whole component
                    "oci://registry.local:5001/models/mlp:1",  # another port
                    "oci://registry.local/models/mlp:1",  # no port is not port 5000
                    "oci://evil.example/models/mlp:1"):
        with pytest.raises(RegistryNotAllowedError, match="allow"):
            policy.check(parse_reference(refused))
    assert policy.is_insecure(parse_reference("oci://registry.local:5000/models/mlp:1"))
    assert not policy.is_insecure(parse_reference("oci://ghcr.io/acme/x:1"))
    with pytest.raises(RegistryNotAllowedError, match=r"pulls from no registry.*\[registry\] "
                       "allow"):
        RegistryPolicy().check(parse_reference("oci://ghcr.io/acme/x:1"))
    for bad in ("oci://host/x", "", "host:0/x", "Host/UPPER"):
        with pytest.raises(OciReferenceError, match=r"\[registry\] allow"):
            parse_allow_entry(bad)
    assert str(parse_allow_entry("host:5000")) == "host:5000"


def test_redirects_go_only_to_allowed_hosts() -> None:
    policy = RegistryPolicy.parse(["ghcr.io/acme", "pkg-containers.githubusercontent.com",
                                   "registry.local:5000/models"], ["registry.local:5000"])
    for ok in ("https://pkg-containers.githubusercontent.com/ghcr1/blobs/sha256:ab?x=1",
               "https://pkg-containers.githubusercontent.com:443/b",  # the default port
               "https://ghcr.io/v2/other/blobs/x",  # a registry's own host: any path
               "http://registry.local:5000/storage/x"):  # plain HTTP where insecure says so
        policy.check_redirect(ok)
    for refused, says in (("https://evil.example/x", "evil.example, which is not in"),
                          ("https://ghcr.io:8443/x", "ghcr.io:8443"),
                          ("http://pkg-containers.githubusercontent.com/x", "plain HTTP"),
                          ("ftp://ghcr.io/x", "ghcr.io"),
                          ("https://ghcr.io:99999/x", "not a URL")):
        with pytest.raises(RegistryNotAllowedError, match=says) as err:
            policy.check_redirect(refused)
        assert "\n" not in str(err.value)
