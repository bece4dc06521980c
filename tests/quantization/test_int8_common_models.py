"""Calibrated int8 on the model shapes people ship, not only CNNs (issue 28): a scikit-learn
MLP exported by skl2onnx (which ONNX Runtime's int32-bias weight adjustment used to crash on),
the same MLP as PyTorch's exporter writes it (Gemm with bias), and a transformer encoder block.
Each builds for both int8 profiles, passes the held-out top-1 gate, and keeps its accuracy on
rows it never saw, run by the agent's own backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edge_agent.backends.base import BackendOptions
from edge_agent.backends.registry import load_backend
from packager.build import build_bundles
from packager.bundle.reader import open_bundle
from packager.bundle.signing import generate_keypair
from tests.support.int8_models import (
    FlatDigits,
    encoder_block,
    flat_digits,
    gemm_mlp,
    sklearn_mlp,
    train_mlp,
)

PROFILES = ("x86_64-cpu-onnxruntime-int8", "x86_64-cpu-openvino-int8")
MODELS = ("sklearn_mlp", "gemm_mlp", "encoder_block")


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FlatDigits, dict[str, Path]]:
    root = tmp_path_factory.mktemp("int8-common")
    data = flat_digits()
    clf = train_mlp(data)
    models = {"sklearn_mlp": sklearn_mlp(root / "skl.onnx", clf),
              "gemm_mlp": gemm_mlp(root / "gemm.onnx", clf),
              "encoder_block": encoder_block(root / "encoder.onnx", data)}
    return root, data, models


def _input_name(model: Path) -> str:
    return str(ort.InferenceSession(str(model)).get_inputs()[0].name)


def _scores(outputs: dict[str, np.ndarray]) -> np.ndarray:
    """The float [N, 10] output (skl2onnx also answers an int64 label)."""
    return next(v for v in outputs.values() if v.dtype == np.float32 and v.ndim == 2)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("model", MODELS)
def test_common_models_build_for_int8_and_keep_their_accuracy(
        cases: tuple[Path, FlatDigits, dict[str, Path]], model: str, profile: str,
        tmp_path: Path) -> None:
    _, data, models = cases
    source = models[model]
    name = _input_name(source)
    calibration = tmp_path / "calib.npz"
    np.savez(calibration, **{name: data.x_calib})
    private, _ = generate_keypair(tmp_path / "keys")
    (bundle,) = build_bundles(source, name=model.replace("_", "-"), version=1,
                              profiles=[profile], out_dir=tmp_path / "out", key_path=private,
                              calibration_data=calibration)
    with open_bundle(bundle) as reader:
        manifest = reader.manifest
        model_dir = reader.extract(tmp_path / "model")
    quant = manifest.parity["quantization"]
    assert manifest.precision == "int8" and quant["method"] == "static-int8-qdq"
    for backend, report in manifest.parity["artifacts"].items():
        if report.get("skipped"):
            continue
        assert report["passed"] and report["top1_agreement"] >= 0.97, (backend, report)
    if model == "encoder_block":
        assert quant["scope"].startswith("weight-bearing ops only")
    if model == "sklearn_mlp":  # ONNX Runtime's adjustment crashes on it: quantized without
        assert quant["int32_bias_weight_adjust"] is False

    fp32 = _scores(dict(zip([o.name for o in ort.InferenceSession(str(source)).get_outputs()],
                            ort.InferenceSession(str(source)).run(None, {name: data.x_test}),
                            strict=True)))
    backend = load_backend(model_dir, manifest, BackendOptions(instances=1, threads=1))
    try:
        int8 = np.concatenate([_scores(backend.infer({name: data.x_test[i:i + 32]}))
                               for i in range(0, len(data.x_test), 32)])
    finally:
        backend.close()
    fp32_acc = float((fp32.argmax(1) == data.y_test).mean())
    int8_acc = float((int8.argmax(1) == data.y_test).mean())
    agreement = float((int8.argmax(1) == fp32.argmax(1)).mean())
    print(f"{model} {profile} ({backend.name}): fp32 accuracy {fp32_acc:.3f}, int8 "
          f"{int8_acc:.3f}, top-1 agreement {agreement:.3f} on {len(data.x_test)} rows")
    assert fp32_acc > 0.8
    assert int8_acc >= fp32_acc - 0.03 and agreement >= 0.95
