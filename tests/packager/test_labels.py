"""``edge-pack build --labels``: parsed, checked against the model's outputs, stored in the
manifest and as labels/OUTPUT.txt of a real bundle."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from packager.build import build_bundles
from packager.bundle.errors import UsageError
from packager.bundle.manifest import Manifest, TensorSpec
from packager.labels import load_labels, parse_label_args
from packager.samples import make_mlp

PROBS = (TensorSpec("probs", "FP32", (-1, 3)),)


def _file(tmp_path: Path, text: str, name: str = "labels.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_label_arguments_name_outputs_or_the_only_one(tmp_path: Path) -> None:
    assert parse_label_args(["a.txt", "probs=b=c.txt"]) == {"": Path("a.txt"),
                                                          "probs": Path("b=c.txt")}
    with pytest.raises(UsageError, match="twice"):
        parse_label_args(["probs=a", "probs=b"])
    with pytest.raises(UsageError, match="OUTPUT=FILE"):
        parse_label_args(["=a.txt"])
    path = _file(tmp_path, "cat\ndog\r\nbird\n")
    assert load_labels({"": path}, PROBS, batched=True) == {"probs": ("cat", "dog", "bird")}


@pytest.mark.parametrize(("text", "outputs", "key", "error"), [
    ("a\nb\n", PROBS, "probs", "2 labels, but output 'probs' has 3 classes"),
    ("", PROBS, "probs", "holds no labels"),
    ("a\nb\nc\n", PROBS, "logits", "no output 'logits'"),
    ("a\nb\nc\n", (TensorSpec("s", "BYTES", (-1, 3)),), "s", "is BYTES, not numbers"),
    ("a\nb\nc\n", (*PROBS, TensorSpec("x", "FP32", (-1, 3))), "", "name one"),
])
def test_labels_that_do_not_fit_the_model_are_refused(tmp_path: Path, text: str, outputs,
                                                      key: str, error: str) -> None:
    with pytest.raises(UsageError, match=error):
        load_labels({key: _file(tmp_path, text)}, outputs, batched=True)


def test_a_built_bundle_carries_the_labels(tmp_path: Path) -> None:
    mlp = make_mlp(tmp_path / "mlp.onnx", out_features=4)
    labels = _file(tmp_path, "w\nx\ny\nz\n")
    [bundle] = build_bundles(mlp, name="m", version=1, profiles=["x86_64-cpu-onnxruntime"],
                             out_dir=tmp_path / "out", labels={"probs": labels})
    with tarfile.open(bundle) as tar:
        manifest_file = tar.extractfile("manifest.json")
        label_member = tar.extractfile("labels/probs.txt")
        assert manifest_file is not None and label_member is not None
        manifest = Manifest.from_json(manifest_file.read())
        assert label_member.read() == b"w\nx\ny\nz\n"
    assert manifest.labels == {"probs": ("w", "x", "y", "z")}
    assert "labels/probs.txt" in {f.path for f in manifest.files}
    [plain] = build_bundles(mlp, name="n", version=1, profiles=["x86_64-cpu-onnxruntime"],
                            out_dir=tmp_path / "out")
    with tarfile.open(plain) as tar:
        manifest_file = tar.extractfile("manifest.json")
        assert manifest_file is not None
        assert b"labels" not in manifest_file.read()  # bytes as before the key existed
