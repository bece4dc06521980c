"""Real conversions of the MLP and light CNNs: artifacts, IO signature, batching, parity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import openvino as ov
import pytest

from packager.build import build_bundles
from packager.bundle.parity import seeded_inputs
from packager.bundle.reader import open_bundle


def _extract(bundle: Path, tmp_path: Path):
    with open_bundle(bundle) as r:
        return r.manifest, r.extract(tmp_path / "model")


def test_mlp_bundles_have_artifacts_signature_and_parity(mlp_bundles, keypair, tmp_path):
    for profile, path in mlp_bundles.items():
        assert path.name == f"mlp-3-{profile}.edgepkg"
        with open_bundle(path) as r:
            r.verify([keypair[1]])
            m = r.manifest
            assert r.signed
        assert m.name == "mlp" and m.version == 3 and m.profile == profile
        assert [(t.name, t.datatype, t.shape) for t in m.inputs] == [("input", "FP32", (-1, 64))]
        assert [(t.name, t.shape) for t in m.outputs] == [("probs", (-1, 10))]
        assert m.batched and m.batching.max_batch_size > 0
        assert all(p <= m.batching.max_batch_size for p in m.batching.preferred_batch_sizes)
        assert m.backend in m.artifacts
        if m.backend == "openvino":
            opts = m.backend_options["openvino"]
            assert opts["num_streams"] == m.batching.instances
            assert opts["performance_hint"] == "THROUGHPUT"
        if m.fallback_backend:
            assert m.fallback_backend in m.artifacts
        assert m.parity["passed"] is True
        for backend, rep in m.parity["artifacts"].items():
            assert rep["batch_sizes"] == [1, 4], backend
            assert rep["top1_agreement"] == 1.0, backend
        assert m.toolchain["onnxruntime"] == ort.__version__
        assert len(m.source_sha256) == 64 and m.source_name == "mlp.onnx"


def test_precision_changes_the_artifact(mlp_bundles):
    reports = {}
    for profile in ("x86_64-cpu-openvino", "x86_64-cpu-openvino-fp16",
                    "arm64-cpu-onnxruntime", "arm64-cpu-onnxruntime-int8"):
        with open_bundle(mlp_bundles[profile]) as r:
            m = r.manifest
        reports[profile] = (m.parity["artifacts"][m.backend]["max_abs_error"],
                            {f.path: f.size for f in m.files})
    fp32_err, fp32_files = reports["x86_64-cpu-openvino"]
    fp16_err, fp16_files = reports["x86_64-cpu-openvino-fp16"]
    assert fp16_files["artifacts/openvino/model.bin"] < 0.6 * fp32_files[
        "artifacts/openvino/model.bin"]
    assert fp16_err > fp32_err  # fp16 weights really changed the numbers
    ort_err, ort_files = reports["arm64-cpu-onnxruntime"]
    q_err, q_files = reports["arm64-cpu-onnxruntime-int8"]
    onnx_path = "artifacts/onnxruntime/model.onnx"
    assert q_files[onnx_path] < 0.5 * ort_files[onnx_path]
    assert q_err > ort_err


def test_extracted_artifacts_run_and_match_the_source(mlp_bundles, mlp_path, tmp_path):
    feeds = {"input": np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)}
    want = ort.InferenceSession(str(mlp_path)).run(None, feeds)[0]
    m, d = _extract(mlp_bundles["x86_64-cpu-openvino"], tmp_path)
    compiled = ov.Core().compile_model(str(d / m.artifacts["openvino"]), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled(feeds)[compiled.output(0)]
    np.testing.assert_allclose(got, want, atol=1e-5)
    sess = ort.InferenceSession(str(d / m.artifacts["onnxruntime"]))
    np.testing.assert_allclose(sess.run(None, feeds)[0], want, atol=1e-6)


def test_jetson_bundle_carries_onnx_and_build_spec(mlp_bundles, squeezenet_bundles):
    for bundle in (mlp_bundles["jetson-orin-tensorrt"], squeezenet_bundles["jetson-orin-tensorrt"]):
        with open_bundle(bundle) as r:
            m = r.manifest
        assert m.backend == "tensorrt" and m.arch == "aarch64" and m.precision == "fp16"
        spec = m.backend_options["tensorrt"]
        assert spec["precision"] == "fp16"
        assert spec["min_batch"] == 1 <= spec["opt_batch"] <= spec["max_batch"]
        assert spec["max_batch"] == m.batching.max_batch_size
        assert spec["workspace_mb"] > 0
        assert m.artifacts["tensorrt"] == "artifacts/tensorrt/model.onnx"
        assert m.fallback_backend == "onnxruntime" and "onnxruntime" in m.artifacts
        assert spec["engines"] == {}  # no TensorRT/GPU here: the device builds the engine
        assert "tensorrt" in m.parity["skipped"]
        assert m.parity["artifacts"]["onnxruntime"]["passed"]


@pytest.mark.parametrize("bundles", ["squeezenet_bundles", "shufflenet_bundles"])
def test_light_cnns_get_a_dynamic_batch_that_really_runs(bundles, request, tmp_path):
    for profile, bundle in request.getfixturevalue(bundles).items():
        if profile.startswith("jetson"):
            continue
        m, d = _extract(bundle, tmp_path / profile)
        assert m.inputs[0].shape == (-1, 3, 224, 224)
        assert m.outputs[0].shape[0] == -1
        # ONNX Runtime artifacts agree with the source; OpenVINO may differ by a few ulps on
        # the constant-fill logits (tests/support/model_factory.py), which the manifest records.
        assert m.parity["passed"] or m.parity["allowed_failure"], m.parity
        assert all(r["passed"] for b, r in m.parity["artifacts"].items() if b == "onnxruntime")
        feeds = seeded_inputs(m.inputs, 3)
        if m.backend == "openvino":
            compiled = ov.Core().compile_model(str(d / m.artifacts["openvino"]), "CPU")
            out = compiled(feeds)[compiled.output(0)]
        else:
            out = ort.InferenceSession(str(d / m.artifacts["onnxruntime"])).run(None, feeds)[0]
        assert out.shape[0] == 3 and out.shape[1] == 1000
        assert np.allclose(out.reshape(3, -1).sum(axis=1), 1.0, atol=1e-3)  # softmax rows


def test_progress_reaches_a_callback_and_a_rich_progress(mlp_path, tmp_path):
    import io

    from rich.console import Console
    from rich.progress import Progress

    events: list[tuple[str, int, int]] = []
    build_bundles(mlp_path, name="mlp", version=1, out_dir=tmp_path / "a",
                  profiles=["x86_64-cpu-openvino"], progress=lambda d, n, t: events.append(
                      (d, n, t)))
    total = events[0][2]
    assert events[-1][1] == total  # every step finished
    assert any("parity check of openvino" in d for d, _, _ in events)
    assert any("convert to onnxruntime" in d for d, _, _ in events)  # the fallback
    console = Console(file=io.StringIO(), force_terminal=False)
    with Progress(console=console) as progress:
        build_bundles(mlp_path, name="mlp", version=2, out_dir=tmp_path / "b",
                      profiles=["x86_64-cpu-onnxruntime"], progress=progress)
        (task,) = progress.tasks
        assert task.finished and task.completed == task.total


def test_onnxruntime_bundles_are_reproducible(mlp_path, tmp_path, monkeypatch, keypair):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    digests = []
    for run in ("one", "two"):
        paths = build_bundles(mlp_path, name="mlp", version=1, out_dir=tmp_path / run,
                              key_path=keypair[0], profiles=["x86_64-cpu-onnxruntime",
                                                             "jetson-orin-tensorrt"])
        digests.append([p.read_bytes() for p in paths])
    assert digests[0] == digests[1]
    with open_bundle(tmp_path / "one" / "mlp-1-x86_64-cpu-onnxruntime.edgepkg") as r:
        assert r.manifest.created == "2023-11-14T22:13:20Z"
