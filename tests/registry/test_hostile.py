"""What a registry sends is hostile input: malformed manifests, oversized or mismatching
content, bad credentials files, bad [registry] config. One-line refusals, nothing written."""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path

import pytest

from edge_agent.config import load_config
from edge_agent.errors import ConfigError
from packager.bundle.errors import ArtifactRejectedError, RegistryAuthError, RegistryError
from packager.bundle.oci.client import (
    Credentials,
    RegistryClient,
    RegistryOptions,
    credentials_from_config,
)
from packager.bundle.oci.layout import (
    BUNDLE_MEDIA_TYPE,
    EMPTY_CONFIG,
    EMPTY_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    digest_of,
)
from packager.bundle.oci.ref import parse_reference
from packager.bundle.oci.transfer import pull_bundles, resolve
from tests.registry.registry_proc import RegistryProcess

HTTP = RegistryOptions(insecure=True, retries=1, backoff_s=0.05)


def _put(registry: RegistryProcess, repo: str, tag: str, body: bytes, media_type: str) -> None:
    req = urllib.request.Request(f"http://{registry.address}/v2/{repo}/manifests/{tag}",
                                 data=body, method="PUT", headers={"Content-Type": media_type})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 201


def _manifest(layers: list[dict[str, object]], annotations: dict[str, str]) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
                       "config": {"mediaType": EMPTY_MEDIA_TYPE,
                                  "digest": digest_of(EMPTY_CONFIG), "size": 2},
                       "layers": layers, "annotations": annotations}).encode()


def test_manifests_that_are_not_bundles_are_refused(registry: RegistryProcess,
                                                    tmp_path: Path) -> None:
    ref = parse_reference(f"oci://{registry.address}/edge/x:1")
    client = RegistryClient(ref, HTTP)
    client.put_blob_bytes(EMPTY_CONFIG, EMPTY_MEDIA_TYPE)
    blob = b"not a bundle" * 10
    client.put_blob_bytes(blob, BUNDLE_MEDIA_TYPE)
    layer = {"mediaType": BUNDLE_MEDIA_TYPE, "digest": digest_of(blob), "size": len(blob)}

    _put(registry, "edge/x", "nolabels", _manifest([layer], {}), MANIFEST_MEDIA_TYPE)
    with pytest.raises(ArtifactRejectedError, match=r"annotation .* is missing"):
        resolve(parse_reference(f"oci://{registry.address}/edge/x:nolabels"), HTTP)

    other = dict(layer, mediaType="application/vnd.oci.image.layer.v1.tar+gzip")
    _put(registry, "edge/x", "image", _manifest([other], {}), MANIFEST_MEDIA_TYPE)
    with pytest.raises(ArtifactRejectedError, match="not an edge-toolkit bundle"):
        resolve(parse_reference(f"oci://{registry.address}/edge/x:image"), HTTP)

    labels = {f"org.edge-toolkit.bundle.{k}": v for k, v in {
        "name": "x", "version": "1", "profile": "p", "arch": "x86_64", "backend": "onnxruntime",
        "manifest.sha256": "0" * 64, "signature.sha256": "unsigned"}.items()}
    _put(registry, "edge/x", "junk", _manifest([layer], labels), MANIFEST_MEDIA_TYPE)
    out = tmp_path / "out"
    with pytest.raises(ArtifactRejectedError, match="not a readable bundle"):
        pull_bundles(parse_reference(f"oci://{registry.address}/edge/x:junk"), out, HTTP)
    assert not any(out.iterdir())

    huge = dict(layer, size=1 << 40)  # declared past every cap: refused before downloading
    _put(registry, "edge/x", "huge", _manifest([huge], labels), MANIFEST_MEDIA_TYPE)
    with pytest.raises(ArtifactRejectedError, match="more than the"):
        pull_bundles(parse_reference(f"oci://{registry.address}/edge/x:huge"), out, HTTP)
    assert not any(out.iterdir())


def test_a_tampered_manifest_is_refused(registry: RegistryProcess) -> None:
    ref = parse_reference(f"oci://{registry.address}/edge/x:1")
    client = RegistryClient(ref, HTTP)
    client.put_blob_bytes(EMPTY_CONFIG, EMPTY_MEDIA_TYPE)
    body = _manifest([], {})
    _put(registry, "edge/x", "1", body, MANIFEST_MEDIA_TYPE)
    data, _, digest = client.get_manifest("1")
    assert data == body and digest == digest_of(body)
    stored = registry.blob_file(digest)  # the registry keeps manifests as blobs too
    stored.write_bytes(stored.read_bytes().replace(b'"schemaVersion": 2', b'"schemaVersion": 3'))
    with pytest.raises(RegistryError):  # the registry itself refuses it (HTTP 500), retried
        client.get_manifest(digest)


def test_docker_config_credentials(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    token = base64.b64encode(b"robot:s3cret:with:colons").decode()
    cfg.write_text(json.dumps({"auths": {"registry.local:5000": {"auth": token},
                                         "https://ghcr.io": {"username": "u",
                                                             "password": "p"}}}))
    assert credentials_from_config(cfg, "registry.local:5000") == Credentials(
        "robot", "s3cret:with:colons")
    assert credentials_from_config(cfg, "ghcr.io") == Credentials("u", "p")
    assert credentials_from_config(cfg, "other.example") is None
    assert credentials_from_config(tmp_path / "none.json", "x") is None
    with pytest.raises(RegistryAuthError, match="does not exist"):
        credentials_from_config(tmp_path / "none.json", "x", required=True)
    cfg.write_text("{not json")
    with pytest.raises(RegistryAuthError, match=r"not a docker config\.json"):
        credentials_from_config(cfg, "x")
    cfg.write_text(json.dumps({"auths": {"x": {"auth": "bm9jb2xvbg=="}}}))  # "nocolon"
    with pytest.raises(RegistryAuthError, match="user:password"):
        credentials_from_config(cfg, "x")


def test_registry_config_section(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    (tmp_path / "auth.json").write_text("{}")
    toml.write_text('[registry]\nallow = ["registry.local:5000/models"]\n'
                    'insecure = ["registry.local:5000"]\nauth_file = "auth.json"\n')
    reg = load_config(toml, state_dir=tmp_path / "s").registry
    assert reg.allow == ("registry.local:5000/models",)
    assert reg.insecure == ("registry.local:5000",)
    assert reg.auth_file == tmp_path / "auth.json"
    assert load_config(None, state_dir=tmp_path / "s").registry.allow == ()
    for body, says in (('allow = ["oci://x/y"]', "no oci://"),
                       ('allow = ["Bad Host/x"]', "registry"),
                       ('insecure = ["h:5000/x"]', "no path"),
                       ("allow = [1]", "not a string"),
                       ("retries = 99", "out of range"),
                       ("pull_timeout_s = 0", "out of range"),
                       ('pull_timeout_s = "10m"', "expected"),
                       ('ca_file = "missing.pem"', "is not a file"),
                       ("pull = true", "unknown")):
        toml.write_text(f"[registry]\n{body}\n")
        with pytest.raises(ConfigError, match=says) as err:
            load_config(toml, state_dir=tmp_path / "s")
        assert "\n" not in str(err.value)
