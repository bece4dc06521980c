"""Static int8 (--calibration-data) on a CNN trained at test time: both CPU runtimes, the
held-out parity gate, the device's own check, and hostile calibration files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_agent.backends.base import BackendOptions
from edge_agent.backends.registry import load_backend
from edge_agent.core.types import InferRequest
from edge_agent.state import Step
from packager.build import build_bundles
from packager.bundle.errors import ParityError, UsageError
from packager.bundle.manifest import Manifest
from packager.bundle.reader import open_bundle
from packager.cli import main
from tests.quantization.conftest import TrainedCnn
from tests.support.digits_cnn import INPUT, OUTPUT, accuracy
from tests.support.harness import managed_agent

INT8 = ("x86_64-cpu-onnxruntime-int8", "x86_64-cpu-openvino-int8")


def _extract(bundle: Path, where: Path) -> tuple[Manifest, Path]:
    with open_bundle(bundle) as r:
        return r.manifest, r.extract(where)


@pytest.fixture(scope="module")
def int8_bundles(trained_cnn: TrainedCnn, tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("int8-out")
    paths = build_bundles(trained_cnn.onnx, name="digits", version=1, profiles=INT8,
                          out_dir=out, key_path=trained_cnn.keys[0],
                          calibration_data=trained_cnn.calibration)
    return dict(zip(INT8, paths, strict=True))


@pytest.mark.parametrize("profile", INT8)
def test_calibrated_int8_keeps_the_trained_accuracy_on_the_agent_backend(
        int8_bundles: dict[str, Path], trained_cnn: TrainedCnn, profile: str,
        tmp_path: Path) -> None:
    manifest, model_dir = _extract(int8_bundles[profile], tmp_path / "model")
    quant = manifest.parity["quantization"]
    assert quant["method"] == "static-int8-qdq" and quant["per_channel_weights"] is True
    assert quant["calibration_samples"] == 160 and quant["held_out_samples"] == 40
    assert manifest.precision == "int8"
    for backend, report in manifest.parity["artifacts"].items():
        assert report["passed"] and report["top1_agreement"] >= 0.97, backend
        assert report["inputs"] == "40 held-out rows of calib.npz"
        assert report["max_abs_error"] > 0  # int8 is not bit-exact: the error is recorded
        assert manifest.backend_options[backend]["quantization"] == "static-int8-qdq"
    assert manifest.parity["tolerance"]["top1_only"] is True
    assert manifest.parity["reference"]["origin"] == "held-out rows of calib.npz"

    backend = load_backend(model_dir, manifest, BackendOptions(instances=1, threads=1))
    try:
        assert backend.name == manifest.backend
        data = trained_cnn.data
        logits = np.concatenate([backend.infer({INPUT: data.x_test[i:i + 32]})[OUTPUT]
                                 for i in range(0, len(data.x_test), 32)])
    finally:
        backend.close()
    import onnxruntime as ort

    fp32 = ort.InferenceSession(str(trained_cnn.onnx)).run(None, {INPUT: data.x_test})[0]
    assert accuracy(fp32, data.y_test) > 0.95
    assert accuracy(logits, data.y_test) >= accuracy(fp32, data.y_test) - 0.02


def test_an_int8_bundle_deploys_through_the_device_parity_step(
        int8_bundles: dict[str, Path], trained_cnn: TrainedCnn, tmp_path: Path) -> None:
    with managed_agent(tmp_path / "state", trained_cnn.keys[1]) as agent:
        done = agent.manager.deploy(int8_bundles["x86_64-cpu-onnxruntime-int8"])
        assert done.ok, done.message
        parity = next(s for s in done.deployment.steps if s.step == Step.PARITY)
        assert parity.ok and "held-out rows of calib.npz" in parity.message
        x = trained_cnn.data.x_test[:5]
        got = agent.dataplane.infer(InferRequest("digits", {INPUT: x})).outputs[OUTPUT]
        assert (np.asarray(got).argmax(axis=1) == trained_cnn.data.y_test[:5]).mean() >= 0.8


def test_a_directory_of_npy_files_calibrates_too(trained_cnn: TrainedCnn,
                                                 tmp_path: Path) -> None:
    d = tmp_path / "calib"
    d.mkdir()
    np.save(d / f"{INPUT}.npy", trained_cnn.data.x_calib[:50])
    [path] = build_bundles(trained_cnn.onnx, name="digits", version=2,
                           profiles=["x86_64-cpu-onnxruntime-int8"], out_dir=tmp_path / "out",
                           calibration_data=d)
    with open_bundle(path) as r:
        q = r.manifest.parity["quantization"]
    assert (q["data"], q["calibration_samples"], q["held_out_samples"]) == ("calib", 40, 10)


def test_agreement_under_the_threshold_is_refused_unless_allowed(
        trained_cnn: TrainedCnn, tmp_path: Path) -> None:
    # calibrated on faint images, checked on real ones: activations saturate
    x = np.concatenate([trained_cnn.data.x_calib[:160] * 0.02, trained_cnn.data.x_calib[:40]])
    bad = tmp_path / "faint.npz"
    np.savez(bad, image=x)
    out = tmp_path / "out"
    with pytest.raises(ParityError, match=r"top-1 agreement .* on 40 held-out rows of faint"):
        build_bundles(trained_cnn.onnx, name="digits", version=1,
                      profiles=["x86_64-cpu-onnxruntime-int8"], out_dir=out,
                      calibration_data=bad)
    assert not any(out.iterdir())
    [path] = build_bundles(trained_cnn.onnx, name="digits", version=1,
                           profiles=["x86_64-cpu-onnxruntime-int8"], out_dir=out,
                           calibration_data=bad, allow_parity_failure=True)
    with open_bundle(path) as r:
        parity = r.manifest.parity
    assert parity["passed"] is False and parity["allowed_failure"] is True
    assert parity["artifacts"]["onnxruntime"]["top1_agreement"] < 0.97


def _hostile(tmp_path: Path, name: str, **arrays: np.ndarray) -> Path:
    p = tmp_path / name
    np.savez(p, **arrays)  # type: ignore[arg-type]
    return p


@pytest.mark.parametrize(("arrays", "message"), [
    ({"pixels": np.zeros((10, 1, 8, 8), np.float32)},
     r"one array per model input \(image\); missing: image, unknown: pixels"),
    ({"image": np.zeros((10, 8, 8), np.float32)},
     r"input 'image' has shape \[10, 8, 8\], expected \[samples, 1, 8, 8\]"),
    ({"image": np.zeros((10, 1, 8, 8), np.int32)}, r"input 'image' is int32, the model takes FP32"),
    ({"image": np.array(["a"] * 10)}, r"input 'image' is <U1, the model takes FP32"),
    ({"image": np.full((10, 1, 8, 8), np.nan, np.float32)},
     r"input 'image' holds NaN or infinite values"),
    ({"image": np.zeros((1, 1, 8, 8), np.float32)}, r"1 sample\(s\); give at least 2"),
])
def test_a_hostile_calibration_file_is_refused_naming_the_input(
        trained_cnn: TrainedCnn, tmp_path: Path, arrays: dict[str, np.ndarray],
        message: str) -> None:
    bad = _hostile(tmp_path, "bad.npz", **arrays)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=r"--calibration-data .*bad\.npz: (needs )?" + message):
        build_bundles(trained_cnn.onnx, name="digits", version=1,
                      profiles=["x86_64-cpu-onnxruntime-int8"], out_dir=out,
                      calibration_data=bad)
    assert not any(out.iterdir())


def test_unreadable_or_misplaced_calibration_data_is_one_clear_line(
        trained_cnn: TrainedCnn, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    base = ["build", str(trained_cnn.onnx), "--name", "digits", "--version", "1", "--quiet",
            "--out", str(tmp_path / "out")]
    cases = [
        (["--profile", "x86_64-cpu-onnxruntime-int8", "--calibration-data", str(junk)],
         "not a readable .npz file"),
        (["--profile", "x86_64-cpu-onnxruntime-int8", "--calibration-data",
          str(tmp_path / "absent.npz")], "no such file or directory"),
        (["--profile", "x86_64-cpu-onnxruntime", "--calibration-data",
          str(trained_cnn.calibration)], "applies to int8 profiles, and none is given"),
        (["--profile", "x86_64-cpu-openvino-int8"], "pass --calibration-data"),
    ]
    for extra, text in cases:
        assert main([*base, *extra]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("edge-pack: error:") and text in err[0], err


def test_the_cli_builds_and_profiles_say_which_int8_to_pick(
        trained_cnn: TrainedCnn, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", str(trained_cnn.onnx), "--name", "digits", "--version", "1",
                 "--quiet", "--out", str(tmp_path / "out"), "--profile",
                 "x86_64-cpu-openvino-int8", "--calibration-data",
                 str(trained_cnn.calibration)]) == 0
    assert "digits-1-x86_64-cpu-openvino-int8.edgepkg" in capsys.readouterr().out
    assert main(["profiles"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "x86_64-cpu-openvino-int8" in text and "x86_64-cpu-onnxruntime-int8" in text
    assert "static" in text and "MatMul-heavy" in text


def test_dynamic_int8_of_a_cnn_warns_to_calibrate(
        trained_cnn: TrainedCnn, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["build", str(trained_cnn.onnx), "--name", "digits", "--version", "1", "--quiet",
            "--out", str(tmp_path / "out"), "--profile", "x86_64-cpu-onnxruntime-int8"]
    # dynamic int8 moves this CNN's logits past the element-wise tolerance
    assert main(args) == 1
    assert "or --calibration-data for static int8" in capsys.readouterr().err
    assert main([*args, "--allow-parity-failure"]) == 0
    err = capsys.readouterr().err
    assert "has 2 Conv nodes" in err and "pass --calibration-data" in err
    with open_bundle(tmp_path / "out" / "digits-1-x86_64-cpu-onnxruntime-int8.edgepkg") as r:
        assert r.manifest.backend_options["onnxruntime"]["quantization"] == "dynamic-int8"
        assert "quantization" not in r.manifest.parity


def test_a_model_with_a_fixed_batch_of_one_calibrates_one_sample_at_a_time(
        trained_cnn: TrainedCnn, tmp_path: Path) -> None:
    import onnx

    m = onnx.load(str(trained_cnn.onnx))
    for vi in [*m.graph.input, *m.graph.output]:
        dim = vi.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_value = 1
    fixed = tmp_path / "fixed.onnx"
    onnx.save(m, str(fixed))
    calib = tmp_path / "one-by-one.npz"
    np.savez(calib, image=trained_cnn.data.x_calib[:50, None])  # [samples, 1, 1, 8, 8]
    [path] = build_bundles(fixed, name="fixed", version=1, profiles=["x86_64-cpu-openvino-int8"],
                           out_dir=tmp_path / "out", calibration_data=calib)
    with open_bundle(path) as r:
        m2 = r.manifest
    assert m2.batching.max_batch_size == 0
    assert m2.parity["quantization"]["held_out_samples"] == 10
    assert all(rep["passed"] and rep["top1_agreement"] >= 0.9
               for rep in m2.parity["artifacts"].values())
    assert m2.parity["reference"]["batch_sizes"] == [1]
