"""Tree and classical models through edge-pack build, checked against each library's predict,
served by the agent's ONNX Runtime backend (also on OpenVINO profiles), and hostile files."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from edge_agent.backends.base import BackendOptions
from edge_agent.backends.registry import load_backend
from edge_agent.core.types import InferRequest
from packager.build import build_bundles
from packager.bundle.errors import ModelError, UsageError
from packager.bundle.manifest import Manifest
from packager.bundle.reader import open_bundle
from packager.cli import main
from tests.support.harness import managed_agent
from tests.trees.conftest import Trained, TreeModels

PROFILES = ("x86_64-cpu-onnxruntime", "x86_64-cpu-openvino")


def _extract(bundle: Path, where: Path) -> tuple[Manifest, Path]:
    with open_bundle(bundle) as r:
        return r.manifest, r.extract(where)


def _serve(model_dir: Path, manifest: Manifest, x: np.ndarray) -> dict[str, np.ndarray]:
    backend = load_backend(model_dir, manifest, BackendOptions(instances=1, threads=1))
    try:
        parts = [backend.infer({"input": x[i:i + 16]}) for i in range(0, len(x), 16)]
    finally:
        backend.close()
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _check_against_library(got: dict[str, np.ndarray], model: Trained) -> None:
    if model.labels is None:
        assert set(got) == {"variable"}
        np.testing.assert_allclose(got["variable"], model.scores, rtol=1e-4, atol=1e-3)
        return
    assert set(got) == {"label", "probabilities"}  # plain tensors, no ZipMap
    assert got["label"].dtype == np.int64 and got["label"].ndim == 1
    assert got["probabilities"].dtype == np.float32
    assert (got["label"] == model.labels).mean() >= 0.99
    np.testing.assert_allclose(got["probabilities"], model.scores, atol=1e-4)


@pytest.mark.parametrize("kind", ["xgboost-json", "xgboost-ubj", "lightgbm", "sklearn-forest",
                                  "xgboost-binary", "sklearn-regressor"])
def test_a_tree_model_builds_for_both_cpu_profiles_and_serves_what_the_library_predicts(
        tree_models: TreeModels, kind: str, tmp_path: Path) -> None:
    model = tree_models.models[kind]
    paths = build_bundles(model.path, name="trees", version=1, profiles=PROFILES,
                          out_dir=tmp_path / "out", key_path=tree_models.keys[0])
    for profile, bundle in zip(PROFILES, paths, strict=True):
        manifest, model_dir = _extract(bundle, tmp_path / profile)
        assert manifest.source_name == model.path.name
        assert manifest.backend == "onnxruntime" and manifest.batching.max_batch_size > 0
        native = manifest.parity["native"]
        assert native["passed"] and native["row_agreement"] >= 0.99, native
        assert native["library"] == kind.split("-")[0]
        assert native["inputs"] == "seeded rows between the split thresholds"
        if profile == "x86_64-cpu-openvino":
            assert manifest.fallback_backend is None
            assert manifest.backend_options["onnxruntime"]["instead_of"] == "openvino"
            assert "ai.onnx.ml" in manifest.parity["skipped"]["openvino"]
        _check_against_library(_serve(model_dir, manifest, model.x_test), model)


def test_inspect_says_onnx_runtime_serves_in_place_of_openvino(
        tree_models: TreeModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [bundle] = build_bundles(tree_models.models["lightgbm"].path, name="lgbm", version=1,
                             profiles=["x86_64-cpu-openvino"], out_dir=tmp_path)
    assert main(["inspect", str(bundle)]) == 0
    text = " ".join(re.sub(r"[\u2500-\u257f]", " ", capsys.readouterr().out).split())
    assert "onnxruntime fp32 (instead of openvino: openvino has no ai.onnx.ml ops" in text
    assert "TreeEnsembleClassifier" in text and "lightgbm" in text


def test_a_tree_bundle_deploys_on_the_agent_and_batches_requests(
        tree_models: TreeModels, tmp_path: Path) -> None:
    model = tree_models.models["xgboost-json"]
    [bundle] = build_bundles(model.path, name="xgb", version=1,
                             profiles=["x86_64-cpu-openvino"], out_dir=tmp_path / "out",
                             key_path=tree_models.keys[0])
    with managed_agent(tmp_path / "state", tree_models.keys[1]) as agent:
        done = agent.manager.deploy(bundle)
        assert done.ok, done.message
        assert agent.dataplane.infer(InferRequest("xgb", {"input": model.x_test[:1]})).version \
            == 1
        futures = [agent.dataplane.submit(InferRequest("xgb", {"input": model.x_test[i:i + 1]}))
                   for i in range(32)]
        rows = [f.result(60) for f in futures]
    labels = np.concatenate([np.asarray(r.outputs["label"]) for r in rows])
    probs = np.concatenate([np.asarray(r.outputs["probabilities"]) for r in rows])
    assert (labels == model.labels[:32]).mean() >= 0.99
    np.testing.assert_allclose(probs, model.scores[:32], atol=1e-4)


def test_tree_models_refuse_int8_profiles(tree_models: TreeModels, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"uses ai.onnx.ml ops .* build it for an fp32 "
                                          "profile"):
        build_bundles(tree_models.models["xgboost-json"].path, name="x", version=1,
                      profiles=["x86_64-cpu-onnxruntime-int8"], out_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_hostile_model_files_get_one_clear_line(tree_models: TreeModels,
                                                 tmp_path: Path) -> None:
    cases: list[tuple[str, bytes, str]] = [
        ("notxgb.json", b'{"hello": 1}', "without a 'learner' object is not an XGBoost model"),
        ("broken.json", b"{nope", "must be an XGBoost model saved with save_model"),
        ("notxgb.ubj", b"\x00\x01garbage", "not an XGBoost UBJSON model"),
        ("notes.txt", b"hello world\n", "must be a LightGBM text model"),
        ("model.skops", pickle.dumps({"a": 1}), "not a skops file"),
    ]
    for name, data, text in cases:
        p = tmp_path / name
        p.write_bytes(data)
        out = tmp_path / f"out-{name}"
        with pytest.raises(ModelError, match=text):
            build_bundles(p, name="m", version=1, profiles=["x86_64-cpu-onnxruntime"],
                          out_dir=out)
        assert not any(out.iterdir())
    with pytest.raises(ModelError, match="no such model file"):
        build_bundles(tmp_path / "absent.json", name="m", version=1,
                      profiles=["x86_64-cpu-onnxruntime"], out_dir=tmp_path / "o")


class Custom:
    """A class outside scikit-learn: a skops file naming it is refused before loading."""

    def __init__(self) -> None:
        self.value = 1


def test_a_skops_file_naming_foreign_types_is_refused_before_loading(tmp_path: Path) -> None:
    import skops.io as sio

    p = tmp_path / "foreign.skops"
    sio.dump({"model": Custom()}, p)
    with pytest.raises(ModelError, match=r"names types outside scikit-learn and numpy .*Custom"):
        build_bundles(p, name="m", version=1, profiles=["x86_64-cpu-onnxruntime"],
                      out_dir=tmp_path / "out")


def test_a_tensorrt_profile_serves_trees_on_its_onnx_runtime_fallback(
        tree_models: TreeModels, tmp_path: Path) -> None:
    [bundle] = build_bundles(tree_models.models["sklearn-forest"].path, name="rf", version=1,
                             profiles=["jetson-orin-tensorrt"], out_dir=tmp_path)
    with open_bundle(bundle) as r:
        m = r.manifest
    assert (m.backend, m.precision, m.fallback_backend) == ("onnxruntime", "fp32", None)
    assert m.backend_options["onnxruntime"]["instead_of"] == "tensorrt"
    assert set(m.artifacts) == {"onnxruntime"}


def test_the_build_parity_rows_walk_the_trees(tree_models: TreeModels, tmp_path: Path) -> None:
    from packager.trees import convert_tree_model, parity_rows

    for kind in ("xgboost-json", "lightgbm", "sklearn-forest"):
        tree = convert_tree_model(tree_models.models[kind].path, tmp_path / f"{kind}.onnx")
        labels = tree.predict(parity_rows(tree.features, None, tree.model))["label"]
        # seeded normal noise reached 2-3 of the 10 digits; rows between thresholds reach most
        assert len(set(labels.tolist())) >= 8, (kind, np.bincount(labels))
