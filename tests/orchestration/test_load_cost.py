"""edge-pack build measures the served artifact's load cost and records it in the manifest."""

from __future__ import annotations

from pathlib import Path

from packager.bundle.manifest import LOAD_COST_KEY
from packager.bundle.reader import open_bundle
from packager.load_cost import measure_load_cost
from tests.orchestration.conftest import CnnBundles


def test_the_manifest_carries_the_load_cost_measured_at_build(cnn_bundles: CnnBundles) -> None:
    costs = {}
    for name, bundle in cnn_bundles.cnn.items():
        with open_bundle(bundle) as reader:
            manifest = reader.manifest
            assert manifest.parity[LOAD_COST_KEY] == manifest.load_cost_bytes
            costs[name] = manifest.load_cost_bytes
    # inception_v1 holds far more weights than squeezenet: the figure says so
    assert 0 < costs["squeezenet"] < costs["inception_v1"], costs


def test_no_figure_where_it_cannot_be_measured(tmp_path: Path) -> None:
    assert measure_load_cost("tensorrt", tmp_path / "model.plan") == 0
    assert measure_load_cost("onnxruntime", tmp_path / "missing.onnx") == 0
