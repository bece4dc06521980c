"""Signatures, tamper detection and safe extraction against hostile archives."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from packager.bundle.errors import BundleError, SignatureError
from packager.bundle.manifest import MANIFEST_NAME, BatchingConfig, FileEntry, Manifest, TensorSpec
from packager.bundle.reader import load_extracted, open_bundle, verify_extracted
from packager.bundle.signing import load_public_key


def _member_offsets(bundle: Path) -> dict[str, tuple[int, int]]:
    with tarfile.open(bundle, "r:") as tar:
        return {m.name: (m.offset_data, m.size) for m in tar.getmembers()}


def _flip(src: Path, dst: Path, offset: int) -> Path:
    data = bytearray(src.read_bytes())
    data[offset] ^= 0x01
    dst.write_bytes(bytes(data))
    return dst


def test_signed_bundle_verifies_and_extracts(mlp_bundles, keypair, tmp_path):
    bundle = mlp_bundles["x86_64-cpu-openvino"]
    with open_bundle(bundle) as r:
        r.verify([keypair[1]])
        r.verify([load_public_key(keypair[1])])
        target = r.extract(tmp_path / "models" / "mlp" / "3")
        manifest = r.manifest
    assert (target / "manifest.sig").stat().st_size == 64
    assert (target / MANIFEST_NAME).read_bytes() == manifest.canonical_bytes()
    assert load_extracted(target) == manifest
    assert sorted(p.name for p in target.parent.iterdir()) == ["3"]  # no temp dir left
    with open_bundle(bundle) as r, pytest.raises(BundleError, match="already exists"):
        r.extract(target)


def test_wrong_key_and_unsigned_are_refused(mlp_bundles, squeezenet_bundles, other_keypair,
                                            keypair):
    with open_bundle(mlp_bundles["x86_64-cpu-onnxruntime"]) as r:
        with pytest.raises(SignatureError, match="not a valid signature"):
            r.verify([other_keypair[1]])
        with pytest.raises(SignatureError, match="no trusted public key"):
            r.verify()
        r.verify([other_keypair[1], keypair[1]])  # any trusted key will do
    with open_bundle(squeezenet_bundles["x86_64-cpu-onnxruntime"]) as r:
        assert not r.signed
        with pytest.raises(SignatureError, match="unsigned"):
            r.verify([keypair[1]])
        r.verify(allow_unsigned=True)


def test_one_flipped_byte_in_any_member_fails_and_names_it(mlp_bundles, keypair, tmp_path):
    bundle = mlp_bundles["x86_64-cpu-openvino"]
    offsets = _member_offsets(bundle)
    assert set(offsets) == {"manifest.json", "manifest.sig", "artifacts/onnxruntime/model.onnx",
                            "artifacts/openvino/model.xml", "artifacts/openvino/model.bin",
                            "reference.npz"}
    for name, (start, size) in offsets.items():
        for where in (0, size // 2, size - 1):
            bad = _flip(bundle, tmp_path / "bad.edgepkg", start + where)
            with pytest.raises(BundleError) as err, open_bundle(bad) as r:
                r.verify([keypair[1]])
            expected = "manifest" if name.startswith("manifest") else name
            assert expected in str(err.value), (name, where, str(err.value))


def test_changed_byte_in_extracted_dir_is_caught(mlp_bundles, tmp_path):
    with open_bundle(mlp_bundles["arm64-cpu-onnxruntime"]) as r:
        target = r.extract(tmp_path / "m")
    model = target / "artifacts" / "onnxruntime" / "model.onnx"
    _flip(model, model, 100)
    with pytest.raises(BundleError, match=r"artifacts/onnxruntime/model\.onnx"):
        load_extracted(target)
    assert load_extracted(target, verify_hashes=False).name == "mlp"


def test_verify_extracted_checks_the_signature_too(mlp_bundles, keypair, other_keypair, tmp_path):
    with open_bundle(mlp_bundles["x86_64-cpu-onnxruntime"]) as r:
        target = r.extract(tmp_path / "m")
    assert verify_extracted(target, [keypair[1]]).name == "mlp"
    with pytest.raises(SignatureError, match="not a valid signature"):
        verify_extracted(target, [other_keypair[1]])
    with pytest.raises(SignatureError, match="no trusted public key"):
        verify_extracted(target)
    (target / "manifest.json").write_bytes(
        (target / "manifest.json").read_bytes().replace(b'"version":3', b'"version":4'))
    with pytest.raises(SignatureError):
        verify_extracted(target, [keypair[1]])


@pytest.mark.parametrize("cut", ["header", "manifest", "last-member", "end-marker"])
def test_truncated_bundle_is_refused(mlp_bundles, tmp_path, cut):
    bundle = mlp_bundles["x86_64-cpu-onnxruntime"]
    data = bundle.read_bytes()
    offsets = _member_offsets(bundle)
    start, size = offsets["artifacts/onnxruntime/model.onnx"]
    at = {"header": 100, "manifest": offsets["manifest.json"][0] + 50,
          "last-member": start + size // 2, "end-marker": start + size + 600}[cut]
    bad = tmp_path / "cut.edgepkg"
    bad.write_bytes(data[:at])
    with pytest.raises(BundleError), open_bundle(bad) as r:
        r.verify(allow_unsigned=True)


def test_not_a_bundle(tmp_path, mlp_path):
    with pytest.raises(BundleError, match="not a bundle"):
        open_bundle(mlp_path)
    with pytest.raises(BundleError, match="no such bundle"):
        open_bundle(tmp_path / "missing.edgepkg")


# -- hostile archives, crafted by hand ---------------------------------------------------------

PAYLOAD = b"x" * 2048


def _manifest(paths: list[str], payload: bytes = PAYLOAD) -> bytes:
    digest = hashlib.sha256(payload).hexdigest()
    m = Manifest(
        name="evil", version=1, profile="x86_64-cpu-onnxruntime", arch="x86_64",
        backend="onnxruntime", precision="fp32",
        inputs=(TensorSpec("x", "FP32", (-1, 4)),), outputs=(TensorSpec("y", "FP32", (-1, 4)),),
        batching=BatchingConfig(max_batch_size=8), artifacts={},
        files=tuple(FileEntry(p, len(payload), digest) for p in paths),
    )
    return m.canonical_bytes()


def _raw_manifest(paths: list[str]) -> bytes:
    d = json.loads(_manifest(["a"]))
    d["files"] = [{"path": p, "size": len(PAYLOAD), "sha256": hashlib.sha256(PAYLOAD).hexdigest()}
                  for p in paths]
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def _tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
    return path


def _special(name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


HOSTILE = {
    "dotdot": ([("manifest.json", _raw_manifest(["../evil"])), ("../evil", PAYLOAD)], "unsafe"),
    "dotdot-inner": ([("manifest.json", _raw_manifest(["a/../../evil"])),
                      ("a/../../evil", PAYLOAD)], "unsafe"),
    "absolute": ([("manifest.json", _raw_manifest(["/tmp/evil"])), ("/tmp/evil", PAYLOAD)],
                 "unsafe"),
    "symlink": ([("manifest.json", _manifest(["a"])),
                 _special("a", tarfile.SYMTYPE, "/etc/passwd")], "symlink"),
    "hardlink": ([("manifest.json", _manifest(["a"])),
                  _special("a", tarfile.LNKTYPE, "/etc/passwd")], "hard link"),
    "device": ([("manifest.json", _manifest(["a"])), _special("a", tarfile.CHRTYPE)],
               "device"),
    "fifo": ([("manifest.json", _manifest(["a"])), _special("a", tarfile.FIFOTYPE)], "device"),
    "directory": ([("manifest.json", _manifest(["a"])), _special("a", tarfile.DIRTYPE)],
                  "directory"),
    "unlisted": ([("manifest.json", _manifest(["a"])), ("a", PAYLOAD), ("b", PAYLOAD)],
                 "not listed"),
    "duplicate": ([("manifest.json", _manifest(["a"])), ("a", PAYLOAD), ("a", PAYLOAD)],
                  "twice"),
    "manifest-not-first": ([("a", PAYLOAD), ("manifest.json", _manifest(["a"]))],
                           "first member"),
    "hidden": ([("manifest.json", _raw_manifest([".bashrc"])), (".bashrc", PAYLOAD)], "unsafe"),
    "backslash": ([("manifest.json", _raw_manifest(["..\\evil"])), ("..\\evil", PAYLOAD)],
                  "unsafe"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_before_writing(case, tmp_path):
    members, message = HOSTILE[case]
    bundle = _tar(tmp_path / f"{case}.edgepkg", members)
    target = tmp_path / "out" / "model"
    with pytest.raises(BundleError, match=message), open_bundle(bundle) as r:
        r.extract(target)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()


def test_oversized_member_is_refused(tmp_path):
    bundle = _tar(tmp_path / "big.edgepkg", [("manifest.json", _manifest(["a"])), ("a", PAYLOAD)])
    with pytest.raises(BundleError, match="past the cap"):
        open_bundle(bundle, max_member_bytes=1024)
    with pytest.raises(BundleError, match="total size cap"):
        open_bundle(bundle, max_total_bytes=1024)
    with open_bundle(bundle) as r:  # within the default caps it is a fine bundle
        r.verify(allow_unsigned=True)
        assert (r.extract(tmp_path / "ok") / "a").read_bytes() == PAYLOAD


def test_member_whose_hash_differs_leaves_nothing_behind(tmp_path):
    bundle = _tar(tmp_path / "lie.edgepkg",
                  [("manifest.json", _manifest(["d/a", "d/b"])), ("d/a", PAYLOAD),
                   ("d/b", b"y" * len(PAYLOAD))])
    out = tmp_path / "out"
    out.mkdir()
    with open_bundle(bundle) as r, pytest.raises(BundleError, match="'d/b' does not match"):
        r.extract(out / "model")
    assert list(out.iterdir()) == []  # the temp dir is gone, the target never appeared


def test_manifest_size_cap(tmp_path):
    fat = _tar(tmp_path / "fat.edgepkg", [("manifest.json", b" " * (17 << 20))])
    with pytest.raises(BundleError, match=r"manifest\.json"):
        open_bundle(fat)
