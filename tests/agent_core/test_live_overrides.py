"""Live settings at the repository: a reload with new overrides serves them only once the
fresh copy is up (a failing one leaves the old copy and the old overrides), and the OpenVINO
hint and stream count of ``[models.NAME]`` reach the compiled model."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.backends.openvino_backend import compile_config
from edge_agent.config import model_overrides
from edge_agent.config.models import ModelOverrides
from edge_agent.core.repository import ModelRepository, _with_openvino_overrides
from edge_agent.errors import AgentError, ConfigError
from packager.build import build_bundles
from packager.bundle.backend_options import OpenVinoOptions
from packager.bundle.reader import open_bundle
from packager.samples import make_mlp


@pytest.fixture(scope="module")
def repo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("live-overrides")
    src = make_mlp(root / "mlp.onnx", seed=5)
    (bundle,) = build_bundles(src, name="mlp", version=1, profiles=["x86_64-cpu-openvino"],
                              out_dir=root / "out", dynamic_batch=True)
    state = root / "state"
    with open_bundle(bundle) as reader:
        reader.extract(state / "models" / "mlp" / "1")
    return state


def test_reload_with_overrides_swaps_them_in_and_a_failure_keeps_the_old(
        repo_dir: Path) -> None:
    repo = ModelRepository(repo_dir, overrides={"mlp": ModelOverrides(isolation="thread")})
    try:
        repo.load_version("mlp", 1)
        assert repo.resolve("mlp").batching.instances == 2
        one = ModelOverrides(instances=1, openvino_hint="THROUGHPUT", isolation="thread")
        repo.reload_version("mlp", 1, overrides=one)
        assert repo.overrides_for("mlp") == one
        assert repo.resolve("mlp").batching.instances == 1
        bad = ModelOverrides(instances=3, device="NoSuchDevice", isolation="thread")
        with pytest.raises(AgentError, match="NoSuchDevice"):
            repo.reload_version("mlp", 1, overrides=bad)
        assert repo.overrides_for("mlp") == one
        assert repo.resolve("mlp").batching.instances == 1
    finally:
        repo.close()


def test_openvino_hint_and_streams_reach_the_compile_config(repo_dir: Path) -> None:
    from edge_agent.core.repository import load_manifest

    manifest = load_manifest(repo_dir / "models" / "mlp" / "1")
    ov = model_overrides("mlp", {"openvino_hint": "throughput", "openvino_streams": 3})
    laid = OpenVinoOptions.of(_with_openvino_overrides(manifest, ov))
    config = compile_config("CPU", 2, 0, laid)
    assert config["PERFORMANCE_HINT"] == "THROUGHPUT" and config["NUM_STREAMS"] == "3"
    assert _with_openvino_overrides(manifest, ModelOverrides()) is manifest
    with pytest.raises(ConfigError, match="openvino_hint"):
        model_overrides("mlp", {"openvino_hint": "FASTEST"})
    with pytest.raises(ConfigError, match="openvino_streams"):
        model_overrides("mlp", {"openvino_streams": 0})
