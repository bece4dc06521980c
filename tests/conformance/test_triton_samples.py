"""The Triton example models compute what Triton's examples check (real ONNX Runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto

from packager.triton_samples import (
    STAGES,
    make_add_sub,
    make_densenet_batched,
    make_densenet_onnx,
    write_triton_example_models,
)


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    total, diff = session.run(["OUTPUT0", "OUTPUT1"], feeds)
    return [np.asarray(total), np.asarray(diff)]


def test_simple_adds_and_subtracts_int32_and_int8(tmp_path: Path) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    total, diff = _run(make_add_sub(tmp_path / "simple.onnx"), {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(diff, a - b)
    a8, b8 = a.astype(np.int8), b.astype(np.int8)
    total8, diff8 = _run(make_add_sub(tmp_path / "simple_int8.onnx", dtype=TensorProto.INT8),
                         {"INPUT0": a8, "INPUT1": b8})
    assert total8.dtype == np.int8
    np.testing.assert_array_equal(total8, a8 + b8)
    np.testing.assert_array_equal(diff8, a8 - b8)


def test_densenet_onnx_has_tritons_signature(tmp_path: Path) -> None:
    session = ort.InferenceSession(str(make_densenet_onnx(tmp_path / "d.onnx")),
                                   providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.shape, out.name, out.shape) == ("data_0", [3, 224, 224], "fc6_1",
                                                          [1000])
    (scores,) = session.run(None, {"data_0": np.zeros((3, 224, 224), np.float32)})
    assert scores.shape == (1000,)


def test_the_ensembles_cnn_batches(tmp_path: Path) -> None:
    session = ort.InferenceSession(str(make_densenet_batched(tmp_path / "d.onnx")),
                                   providers=["CPUExecutionProvider"])
    (scores,) = session.run(None, {"data_0": np.zeros((2, 3, 224, 224), np.float32)})
    assert scores.shape == (2, 1000)


def test_every_example_model_is_written(tmp_path: Path) -> None:
    models = {m.name: m for m in write_triton_example_models(tmp_path)}
    assert set(models) == {"simple", "simple_int8", "simple_string", "simple_identity",
                           "custom_identity_int32", "simple_sequence", "simple_dyna_sequence",
                           "densenet_onnx", "repeat_int32", "image_preprocess", "ensemble_cnn",
                           "preprocess_inception_ensemble"}
    # the model control examples count 7 (HTTP) and 8 (gRPC) models: the stages give them that
    stages = {stage: {n for n, m in models.items() if m.stage == stage
                      and n != "custom_identity_int32"} for stage in STAGES}
    assert (len(stages["base"]), len(stages["late"]), len(stages["ensemble"])) == (7, 1, 3)
    ensemble = models["preprocess_inception_ensemble"].source.read_text()
    assert 'labels = { OUTPUT = "labels.txt" }' in ensemble
    assert all(m.source.is_file() for m in models.values())
    spec = models["repeat_int32"].source.read_text()
    assert 'entry = "repeat:repeat"' in spec and "decoupled = true" in spec
    labels = models["densenet_onnx"].labels
    assert labels is not None and len(labels.read_text().splitlines()) == 1000


def test_simple_sequence_adds_start_and_is_built_stateful(tmp_path: Path) -> None:
    models = {m.name: m for m in write_triton_example_models(tmp_path)}
    for name in ("simple_sequence", "simple_dyna_sequence"):
        assert models[name].build_args[:2] == ("--sequence", "oldest")
    session = ort.InferenceSession(str(models["simple_sequence"].source),
                                   providers=["CPUExecutionProvider"])
    col = np.array([[4], [9]], np.int32)
    feed = {"INPUT": col, "START": np.array([[1], [0]], np.int32),
            "READY": np.ones((2, 1), np.int32)}
    (out,) = session.run(None, feed)
    assert out.ravel().tolist() == [5, 9]  # what Triton's sequence examples check
