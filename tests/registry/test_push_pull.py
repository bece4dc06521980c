"""edge-pack push / pull against a real docker-registry (plain HTTP on 127.0.0.1)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from packager.bundle.errors import ArtifactNotFoundError, ArtifactRejectedError
from packager.bundle.oci.client import RegistryOptions
from packager.bundle.oci.layout import BUNDLE_MEDIA_TYPE, INDEX_MEDIA_TYPE, PROFILE, SIGNATURE_SHA
from packager.bundle.oci.ref import parse_reference
from packager.bundle.oci.transfer import pull_bundles, resolve
from packager.cli import main as edge_pack
from tests.registry.registry_proc import RegistryProcess
from tests.support.bundles import Bundles

HTTP = RegistryOptions(insecure=True, retries=1, backoff_s=0.05)


def _get_json(url: str, accept: str) -> dict:
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_push_then_pull_gives_the_same_bytes(registry: RegistryProcess, bundles: Bundles,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ref = f"oci://{registry.address}/edge/mlp:1"
    assert edge_pack(["push", str(bundles.mlp[1]), str(bundles.arm64), ref, "--insecure"]) == 1
    assert "one push holds one model version" in capsys.readouterr().err  # 1 and 4 differ
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "--insecure", "-q"]) == 0
    pinned = capsys.readouterr().out.strip()
    assert pinned.startswith(f"oci://{registry.address}/edge/mlp@sha256:")

    index = _get_json(f"http://{registry.address}/v2/edge/mlp/manifests/1", INDEX_MEDIA_TYPE)
    assert index["mediaType"] == INDEX_MEDIA_TYPE
    (entry,) = index["manifests"]
    assert entry["annotations"][PROFILE] == "x86_64-cpu-onnxruntime"
    assert entry["platform"] == {"os": "linux", "architecture": "amd64"}
    manifest = _get_json(f"http://{registry.address}/v2/edge/mlp/manifests/{entry['digest']}",
                         entry["mediaType"])
    assert manifest["layers"][0]["mediaType"] == BUNDLE_MEDIA_TYPE
    assert len(manifest["annotations"][SIGNATURE_SHA]) == 64  # signed

    out = tmp_path / "pulled"
    assert edge_pack(["pull", pinned, "--out", str(out), "--insecure"]) == 0
    (got,) = out.iterdir()
    assert got.name == bundles.mlp[1].name
    assert got.read_bytes() == bundles.mlp[1].read_bytes()
    # pulling again into the same directory refuses and keeps the file
    assert edge_pack(["pull", ref, "--out", str(out), "--insecure"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_push_of_another_profile_keeps_the_first(registry: RegistryProcess, bundles: Bundles,
                                                 tmp_path: Path) -> None:
    """Two pushes of one version (one profile each) leave an index over both profiles."""
    from packager.build import build_bundles

    ref = parse_reference(f"oci://{registry.address}/edge/mlp:1")
    (arm,) = build_bundles(bundles.sources[1], name="mlp", version=1,
                           profiles=["arm64-cpu-onnxruntime"], out_dir=tmp_path / "arm",
                           key_path=bundles.private_key, dynamic_batch=True)
    assert edge_pack(["push", str(bundles.mlp[1]), str(ref), "--insecure", "-q"]) == 0
    assert edge_pack(["push", str(arm), str(ref), "--insecure", "-q"]) == 0
    resolved = resolve(ref, HTTP)
    assert sorted(e.annotations[PROFILE] for e in resolved.entries) == [
        "arm64-cpu-onnxruntime", "x86_64-cpu-onnxruntime"]
    paths = pull_bundles(ref, tmp_path / "one", HTTP, profile="arm64-cpu-onnxruntime")
    assert [p.read_bytes() for p in paths] == [arm.read_bytes()]


def test_unknown_tag_and_tampered_blob_are_refused(registry: RegistryProcess,
                                                   bundles: Bundles, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    ref = parse_reference(f"oci://{registry.address}/edge/mlp:1")
    with pytest.raises(ArtifactNotFoundError, match="not found"):
        resolve(parse_reference(f"oci://{registry.address}/edge/mlp:nope"), HTTP)
    assert edge_pack(["pull", f"oci://{registry.address}/edge/mlp:nope", "--out",
                      str(tmp_path / "x"), "--insecure"]) == 1
    assert "not found" in capsys.readouterr().err

    assert edge_pack(["push", str(bundles.mlp[1]), str(ref), "--insecure", "-q"]) == 0
    capsys.readouterr()
    data = registry.blob_file(_blob_digest(registry, "edge/mlp", "1"))
    raw = bytearray(data.read_bytes())
    raw[-2000] ^= 0xFF  # one byte inside the last member, same size
    data.write_bytes(bytes(raw))
    out = tmp_path / "pulled"
    with pytest.raises(ArtifactRejectedError, match="tampered or corrupt"):
        pull_bundles(ref, out, HTTP)
    assert not any(out.iterdir())  # nothing left behind


def _blob_digest(registry: RegistryProcess, repo: str, tag: str) -> str:
    index = _get_json(f"http://{registry.address}/v2/{repo}/manifests/{tag}", INDEX_MEDIA_TYPE)
    digest = index["manifests"][0]["digest"]
    manifest = _get_json(f"http://{registry.address}/v2/{repo}/manifests/{digest}",
                         index["manifests"][0]["mediaType"])
    return str(manifest["layers"][0]["digest"])


def test_push_help_and_bad_reference(capsys: pytest.CaptureFixture[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "packager.cli", "push", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--password-stdin" in out and "oci://" in out
    assert edge_pack(["push", "x.edgepkg", "oci://Bad Host/x:1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no spaces" in err


@pytest.mark.parametrize("leftover", ["prefix", "garbage"])
def test_pull_resumes_a_partial_file(registry: RegistryProcess, bundles: Bundles,
                                     tmp_path: Path, leftover: str) -> None:
    """A `.NAME.part` left by an interrupted pull is resumed; one that is not a prefix of the
    blob is dropped and the pull starts again from the first byte."""
    ref = parse_reference(f"oci://{registry.address}/edge/mlp:1")
    assert edge_pack(["push", str(bundles.mlp[1]), str(ref), "--insecure", "-q"]) == 0
    out = tmp_path / "out"
    out.mkdir()
    data = bundles.mlp[1].read_bytes()
    part = out / f".{bundles.mlp[1].name}.part"
    part.write_bytes(data[:20_000] if leftover == "prefix" else b"\0" * 20_000)
    (got,) = pull_bundles(ref, out, HTTP)
    assert got.read_bytes() == data
    assert not part.exists()


def test_a_second_push_keeps_the_index_entries_whole(registry: RegistryProcess,
                                                     bundles: Bundles, tmp_path: Path) -> None:
    from packager.build import build_bundles

    ref = f"oci://{registry.address}/edge/mlp:1"
    (arm,) = build_bundles(bundles.sources[1], name="mlp", version=1,
                           profiles=["arm64-cpu-onnxruntime"], out_dir=tmp_path / "arm",
                           key_path=bundles.private_key, dynamic_batch=True)
    assert edge_pack(["push", str(arm), ref, "--insecure", "-q"]) == 0
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "--insecure", "-q"]) == 0
    index = _get_json(f"http://{registry.address}/v2/edge/mlp/manifests/1", INDEX_MEDIA_TYPE)
    assert [(e["annotations"][PROFILE], e["platform"]["architecture"])
            for e in index["manifests"]] == [("arm64-cpu-onnxruntime", "arm64"),
                                             ("x86_64-cpu-onnxruntime", "amd64")]
