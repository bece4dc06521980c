"""The TensorRT path: engine keys always; the engine build only with TensorRT and a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from packager.tensorrt_build import engine_key, tensorrt_available

TRT_OK, TRT_WHY = tensorrt_available()


def test_engine_key_is_a_safe_file_name():
    assert engine_key("10.3.0", "Orin (nvgpu)") == "10.3.0-Orin_nvgpu"
    assert engine_key("8.6.2", "NVIDIA GeForce RTX 4090") == "8.6.2-NVIDIA_GeForce_RTX_4090"


def test_availability_reports_a_reason_when_missing():
    if not TRT_OK:
        assert TRT_WHY  # e.g. "TensorRT (the tensorrt Python package) is not installed"


@pytest.mark.tensorrt
@pytest.mark.skipif(not TRT_OK, reason=f"TensorRT engine build needs TensorRT and a GPU: {TRT_WHY}")
def test_prebuilt_engine_matches_the_source(mlp_path, tmp_path):  # pragma: no cover
    from packager.build import build_bundles
    from packager.bundle.reader import open_bundle
    from packager.tensorrt_build import engine_runner

    (path,) = build_bundles(mlp_path, name="mlp", version=1, out_dir=tmp_path / "o",
                            profiles=["jetson-orin-tensorrt"])
    with open_bundle(path) as r:
        m = r.manifest
        d = r.extract(tmp_path / "x")
    spec = m.backend_options["tensorrt"]
    assert len(spec["engines"]) == 1
    assert m.parity["artifacts"]["tensorrt"]["passed"]
    run = engine_runner(d / next(iter(spec["engines"].values())))
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    assert run({"input": x})["probs"].shape == (8, 10)
