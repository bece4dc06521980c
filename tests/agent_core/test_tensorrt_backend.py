"""TensorRT backend: the build spec, the engine cache key, the fallback on a device without it,
and (only where TensorRT and an NVIDIA GPU exist) real inference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_agent.backends import BackendOptions, backend_available, load_backend
from edge_agent.backends.tensorrt_backend import build_spec, cache_key
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.repository import load_manifest
from edge_agent.core.types import InferRequest
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import build, install, reference_outputs

HAVE_TRT = backend_available("tensorrt")


@pytest.fixture(scope="module")
def jetson_dir(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("jetson")
    bundle = build(bundles.mlp_v1_onnx, d / "out", "mlp", 1, profile="jetson-orin-tensorrt")
    install(bundle, d / "state")
    return d / "state"


def test_build_spec_comes_from_the_bundle(jetson_dir: Path) -> None:
    manifest = load_manifest(jetson_dir / "models" / "mlp" / "1")
    assert manifest.backend == "tensorrt" and manifest.fallback_backend == "onnxruntime"
    spec = build_spec(manifest)
    assert spec == {"precision": "fp16", "min_batch": 1, "opt_batch": 8, "max_batch": 8,
                    "workspace_mb": 1024}


def test_cache_key_changes_with_version_gpu_model_and_spec() -> None:
    spec = {"precision": "fp16", "min_batch": 1, "opt_batch": 8, "max_batch": 32,
            "workspace_mb": 1024}
    base = cache_key("10.3.0", "Orin", "ab" * 32, spec)
    assert base == cache_key("10.3.0", "Orin", "ab" * 32, dict(spec))
    assert len({base, cache_key("10.4.0", "Orin", "ab" * 32, spec),
                cache_key("10.3.0", "Xavier", "ab" * 32, spec),
                cache_key("10.3.0", "Orin", "cd" * 32, spec),
                cache_key("10.3.0", "Orin", "ab" * 32, {**spec, "precision": "fp32"})}) == 5


@pytest.mark.skipif(HAVE_TRT, reason="this device has TensorRT; the fallback is not used")
def test_jetson_bundle_falls_back_to_onnxruntime_without_tensorrt(jetson_dir: Path,
                                                                  bundles: Bundles) -> None:
    dp = DataPlane(jetson_dir)
    try:
        assert dp.model_config("mlp").backend == "onnxruntime"
        x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
        out = dp.infer(InferRequest("mlp", {"input": x}), 30).outputs["probs"]
        ref = reference_outputs(bundles.mlp_v1_onnx, {"input": x})["probs"]
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    finally:
        dp.close()


@pytest.mark.tensorrt
@pytest.mark.skipif(not HAVE_TRT, reason="TensorRT and pycuda are not installed and there is "
                    "no NVIDIA GPU on this machine")
def test_tensorrt_engine_builds_caches_and_matches_the_source(jetson_dir: Path,
                                                              bundles: Bundles) -> None:
    model_dir = jetson_dir / "models" / "mlp" / "1"
    manifest = load_manifest(model_dir)
    backend = load_backend(model_dir, manifest, BackendOptions(instances=2,
                                                               state_dir=jetson_dir))
    try:
        assert backend.name == "tensorrt"
        assert list((jetson_dir / "engines").glob("*.engine"))
        x = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)
        ref = reference_outputs(bundles.mlp_v1_onnx, {"input": x})["probs"]
        for instance in (0, 1):
            out = backend.infer({"input": x}, instance)["probs"]
            np.testing.assert_allclose(out, ref, rtol=2e-2, atol=5e-3)
    finally:
        backend.close()


def test_the_agent_builds_engines_with_the_packagers_code() -> None:
    # one engine build, one prebuilt-engine key and one spec for the packager and the agent
    from edge_agent.backends import tensorrt_backend
    from packager.bundle import tensorrt_engine

    assert tensorrt_backend.build_engine is tensorrt_engine.build_engine
    assert tensorrt_backend.engine_key is tensorrt_engine.engine_key
    assert tensorrt_backend.SPEC_KEYS is tensorrt_engine.SPEC_KEYS


@pytest.mark.skipif(HAVE_TRT, reason="this device has TensorRT")
def test_without_tensorrt_the_backend_says_what_is_missing() -> None:
    from edge_agent.backends.tensorrt_backend import _load_runtime
    from edge_agent.errors import RuntimeMissingError
    from packager.tensorrt_build import tensorrt_available

    ok, why = tensorrt_available()
    assert not ok and why
    with pytest.raises(RuntimeMissingError) as caught:
        _load_runtime()
    assert str(caught.value) == f"TensorRT backend: {why}"
