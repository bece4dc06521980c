"""The edge-pack CLI end to end in a subprocess, and help that teaches."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from packager.bundle.profiles import load_profile
from packager.cli import main

REPO = Path(__file__).resolve().parents[2]


def edge_pack(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "packager.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


def test_keygen_build_inspect_verify_end_to_end(tmp_path, mlp_path):
    r = edge_pack("keygen", "--out", "keys", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    priv, pub = tmp_path / "keys" / "edge-pack.key", tmp_path / "keys" / "edge-pack.pub"
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    again = edge_pack("keygen", "--out", "keys", cwd=tmp_path)
    assert again.returncode == 1 and "already exists" in again.stderr

    r = edge_pack("build", str(mlp_path), "--name", "mlp", "--version", "7",
                  "--profile", "x86_64-cpu-onnxruntime", "--profile", "arm64-cpu-onnxruntime",
                  "--key", str(priv), "--max-batch", "8", "--out", "dist", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    paths = r.stdout.split()
    assert paths == ["dist/mlp-7-x86_64-cpu-onnxruntime.edgepkg",
                     "dist/mlp-7-arm64-cpu-onnxruntime.edgepkg"]
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == sorted(
        Path(p).name for p in paths)  # no staging leftovers
    bundle = tmp_path / paths[0]

    r = edge_pack("inspect", str(bundle), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["signed"] is True
    m = doc["manifest"]
    assert (m["name"], m["version"], m["profile"]) == ("mlp", 7, "x86_64-cpu-onnxruntime")
    preferred = [b for b in load_profile("x86_64-cpu-onnxruntime").batching.preferred_batch_sizes
                 if b <= 8]  # --max-batch 8 drops the profile's larger preferred sizes
    assert m["batching"]["max_batch_size"] == 8
    assert m["batching"]["preferred_batch_sizes"] == preferred and preferred
    assert m["parity"]["passed"] is True

    r = edge_pack("inspect", str(bundle), cwd=tmp_path)
    assert r.returncode == 0 and "mlp version 7" in r.stdout and "probs" in r.stdout

    r = edge_pack("verify", str(bundle), "--pubkey", str(pub), cwd=tmp_path)
    assert r.returncode == 0 and "signature valid" in r.stdout, r.stderr
    r = edge_pack("verify", str(bundle), cwd=tmp_path)
    assert r.returncode == 0 and "NOT checked" in r.stdout

    # one changed byte in the artifact: verify names the file
    with tarfile.open(bundle) as tar:
        member = tar.getmember("artifacts/onnxruntime/model.onnx")
    data = bytearray(bundle.read_bytes())
    data[member.offset_data + 200] ^= 0xFF
    bad = tmp_path / "bad.edgepkg"
    bad.write_bytes(bytes(data))
    r = edge_pack("verify", str(bad), "--pubkey", str(pub), cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0
    assert "artifacts/onnxruntime/model.onnx" in r.stderr and "sha256" in r.stderr

    r = edge_pack("profiles", "--json", cwd=tmp_path)
    assert r.returncode == 0
    assert "jetson-orin-tensorrt" in {p["name"] for p in json.loads(r.stdout)}


def test_unsigned_build_is_marked(tmp_path, mlp_path, capsys):
    code = main(["build", str(mlp_path), "--name", "mlp", "--version", "1", "--profile",
                 "x86_64-cpu-onnxruntime", "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 0
    captured = capsys.readouterr()
    assert "unsigned" in captured.err
    assert main(["verify", captured.out.strip()]) == 0
    assert "UNSIGNED" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["", "keygen", "build", "inspect", "verify", "profiles"])
def test_help_teaches_with_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*([command] if command else []), "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: edge-pack" in out and "example" in out and "edge-pack " + command in out


def test_missing_arguments_exit_nonzero(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["build", "model.onnx"])
    assert exit_info.value.code == 2
    assert "--name" in capsys.readouterr().err


def test_max_batch_on_a_fixed_batch_model_warns_and_names_dynamic_batch(tmp_path: Path) -> None:
    from packager.samples import make_mlp

    fixed = make_mlp(tmp_path / "fixed.onnx", seed=3, dynamic_batch=False)
    args = ("build", str(fixed), "--name", "fixed", "--profile", "x86_64-cpu-onnxruntime",
            "--max-batch", "16", "--quiet")
    r = edge_pack(*args, "--version", "1", "--out", "plain", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    warning = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "--max-batch 16 has no effect" in warning[0]
    assert "--dynamic-batch" in warning[0] and "fixed.onnx" in warning[0]
    r = edge_pack(*args, "--version", "2", "--dynamic-batch", "--out", "batched", cwd=tmp_path)
    assert r.returncode == 0 and "warning:" not in r.stderr, r.stderr


def test_build_refuses_to_replace_a_bundle_built_from_other_weights(tmp_path: Path) -> None:
    from tests.support.model_factory import make_mlp

    first, other = make_mlp(tmp_path / "a.onnx", seed=1), make_mlp(tmp_path / "b.onnx", seed=2)
    args = ("--name", "mlp", "--version", "1", "--profile", "x86_64-cpu-onnxruntime",
            "--out", "dist", "--quiet")
    built = edge_pack("build", str(first), *args, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    bundle = tmp_path / "dist" / "mlp-1-x86_64-cpu-onnxruntime.edgepkg"
    before = bundle.read_bytes()
    refused = edge_pack("build", str(other), *args, cwd=tmp_path)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert str(Path("dist") / bundle.name) in refused.stderr
    assert "--overwrite" in refused.stderr and "another source" in refused.stderr
    assert bundle.read_bytes() == before
    assert [p.name for p in (tmp_path / "dist").iterdir()] == [bundle.name]  # no stage left
    again = edge_pack("build", str(first), *args, cwd=tmp_path)  # a rebuild: same source
    assert again.returncode == 0, again.stderr
    replaced = edge_pack("build", str(other), *args, "--overwrite", cwd=tmp_path)
    assert replaced.returncode == 0, replaced.stderr
    from packager.bundle.format import sha256_file
    from packager.bundle.reader import open_bundle

    with open_bundle(bundle) as reader:
        assert reader.manifest.source_sha256 == sha256_file(other)
    assert "--overwrite" in edge_pack("build", "--help", cwd=tmp_path).stdout
