"""``warmup`` and ``decoupled`` are manifest fields; bundles written before them carried them
in ``backend_options[backend]``, and such manifests read the same and keep their bytes (so
their signatures still verify)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.bundle.errors import BundleError
from packager.bundle.manifest import BatchingConfig, Manifest, TensorSpec


def _manifest(**kw: object) -> Manifest:
    base: dict[str, object] = dict(
        name="gen", version=1, profile="x86_64-cpu-onnxruntime", arch="x86_64",
        backend="python", precision="fp32", inputs=(TensorSpec("x", "FP32", (-1, 4)),),
        outputs=(TensorSpec("y", "FP32", (-1, 4)),), batching=BatchingConfig(),
        artifacts={"python": "code/gen.py"},
        backend_options={"python": {"entry": "gen:run", "requires": []}})
    base.update(kw)
    return Manifest(**base)  # type: ignore[arg-type]


def test_new_manifests_carry_the_fields_only_when_they_say_something() -> None:
    plain = json.loads(_manifest().canonical_bytes())
    assert "warmup" not in plain and "decoupled" not in plain
    streaming = _manifest(warmup=False, decoupled=True)
    data = json.loads(streaming.canonical_bytes())
    assert (data["warmup"], data["decoupled"]) == (False, True)
    assert "decoupled" not in data["backend_options"]["python"]
    again = Manifest.from_json(streaming.canonical_bytes())
    assert (again.warmup, again.decoupled) == (False, True) and again == streaming


def test_old_manifests_read_the_flags_from_backend_options_and_keep_their_bytes() -> None:
    old = json.loads(_manifest().canonical_bytes())
    old["backend_options"]["python"].update(decoupled=True, warmup=False)
    raw = json.dumps(old, sort_keys=True, separators=(",", ":")).encode()
    manifest = Manifest.from_json(raw)
    assert (manifest.warmup, manifest.decoupled) == (False, True)
    assert manifest.canonical_bytes() == raw  # the signed bytes are reproduced exactly
    pipeline = json.loads(_manifest(backend="pipeline", backend_options={
        "pipeline": {"steps": [], "warmup": False}}).canonical_bytes())
    assert Manifest.from_dict(pipeline).warmup is False
    onnx = Manifest.from_dict(json.loads(_manifest(backend="onnxruntime").canonical_bytes()))
    assert (onnx.warmup, onnx.decoupled) == (True, False)


@pytest.mark.parametrize("where", ["top", "legacy"])
def test_a_flag_that_is_not_a_bool_is_refused(where: str) -> None:
    data = json.loads(_manifest().canonical_bytes())
    if where == "top":
        data["decoupled"] = "yes"
    else:
        data["backend_options"]["python"]["decoupled"] = "yes"
    with pytest.raises(BundleError, match="decoupled"):
        Manifest.from_dict(data)


def test_inspect_shows_the_flags(tmp_path: Path) -> None:
    from rich.console import Console

    from packager.inspect_view import render_manifest

    console = Console(record=True, width=200)
    render_manifest(_manifest(warmup=False, decoupled=True), True, tmp_path / "gen.edgepkg",
                    console)
    text = console.export_text()
    assert "warmup = false" in text and "decoupled" in text
    plain = Console(record=True, width=200)
    render_manifest(_manifest(backend="onnxruntime"), True, tmp_path / "m.edgepkg", plain)
    assert "warmup" not in plain.export_text()
