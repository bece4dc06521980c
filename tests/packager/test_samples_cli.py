"""``edge-pack sample``: the models the README's Quickstart builds, written by the toolkit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from packager.cli import main


def test_cnn_sample_and_its_calibration_data_fit_each_other(tmp_path: Path) -> None:
    model, calib = tmp_path / "cnn.onnx", tmp_path / "calib.npz"
    assert main(["sample", "cnn", "--out", str(model), "--calibration-data", str(calib)]) == 0
    images = np.load(calib)["image"]
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    assert inp.name == "image" and list(images.shape[1:]) == inp.shape[1:]
    logits = session.run(None, {"image": images})[0]
    top2 = np.sort(logits, axis=1)[:, -2:]
    # wide margins: int8 keeps the top-1 answer (the build checks top-1 agreement)
    assert (top2[:, 1] - top2[:, 0]).min() > 1.0
    assert len(set(logits.argmax(1).tolist())) == logits.shape[1]  # every class is reached


def test_the_same_command_writes_the_same_model(tmp_path: Path) -> None:
    for name in ("a.onnx", "b.onnx"):
        assert main(["sample", "mlp", "--out", str(tmp_path / name)]) == 0
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_calibration_data_goes_with_the_cnn_only(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.onnx"
    assert main(["sample", "mlp", "--out", str(out), "--calibration-data", "c.npz"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "edge-pack: error: --calibration-data goes with the cnn sample only [USAGE]"
    assert not out.exists()


@pytest.mark.parametrize(("kind", "name"), [("xgboost", "model.json"),
                                            ("lightgbm", "model.txt"),
                                            ("sklearn", "forest.skops")])
def test_tree_samples_are_saved_the_way_their_library_saves(tmp_path: Path, kind: str,
                                                            name: str) -> None:
    pytest.importorskip("xgboost", reason="the [trees] extra is not installed")
    from packager.trees import convert_tree_model, tree_kind

    out = tmp_path / name
    assert main(["sample", kind, "--out", str(out)]) == 0
    assert tree_kind(out) == kind
    convert_tree_model(out, tmp_path / "model.onnx")  # what edge-pack build does first
    assert (tmp_path / "model.onnx").stat().st_size > 0
