"""ONNX Runtime bundles with their weights as ONNX external data (issue 28): edge-pack build
writes ``model.onnx`` plus ``model.onnx.data`` (format version 2) for a model with more than
8 MiB of weights, each file hashed in the signed manifest; a changed data file is refused
naming it; the agent loads the bundle under a memory budget of 1.5 models with the load's
peak, as the agent itself measured it, within the budget + 10 % (from one file the load peaked
at about twice the weights, past it); a runtime process serves it too; small models stay
single-file (format version 1)."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import psutil
import pytest

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.repository import load_manifest
from edge_agent.core.types import InferRequest
from packager.build import build_bundles
from packager.bundle.errors import BundleError
from packager.bundle.manifest import EXTERNAL_DATA_FORMAT, FORMAT_VERSION, Manifest
from packager.bundle.reader import open_bundle
from packager.bundle.signing import generate_keypair
from tests.support.model_factory import LIGHT_BUILD, padded_light_model

MIB = 1 << 20
PROFILE = "x86_64-cpu-onnxruntime"
GRAPH = "artifacts/onnxruntime/model.onnx"
DATA = "artifacts/onnxruntime/model.onnx.data"
PAD_MIB = 80


class Built:
    """A padded CNN (``PAD_MIB`` MiB of weights that every inference reads), its bundle and
    the key pair that signed it."""

    def __init__(self, root: Path) -> None:
        self.private, self.public = generate_keypair(root / "keys")
        self.source = padded_light_model("squeezenet", root / "onnx", PAD_MIB)
        (self.bundle,) = build_bundles(self.source, name="big", version=1, profiles=[PROFILE],
                                       out_dir=root / "out", key_path=self.private,
                                       dynamic_batch=True, **LIGHT_BUILD)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return Built(tmp_path_factory.mktemp("external-data"))


def test_a_model_with_large_weights_is_bundled_as_a_graph_and_a_data_file(built: Built) -> None:
    with open_bundle(built.bundle) as reader:
        reader.verify([built.public])
        manifest = reader.manifest
    assert manifest.format_version == EXTERNAL_DATA_FORMAT
    assert manifest.artifacts == {"onnxruntime": GRAPH}
    assert manifest.external_data == {"onnxruntime": (DATA,)}
    sizes = {f.path: f.size for f in manifest.files}
    assert sizes[GRAPH] < MIB <= PAD_MIB * MIB <= sizes[DATA]  # the weights left the graph
    assert all(len(f.sha256) == 64 for f in manifest.files if f.path in (GRAPH, DATA))
    assert manifest.parity["passed"] and manifest.parity["artifacts"]["onnxruntime"]["passed"]
    assert PAD_MIB * MIB < manifest.load_cost_bytes < 2 * PAD_MIB * MIB


def test_a_small_model_stays_one_file_at_format_version_1(tmp_path: Path) -> None:
    source = padded_light_model("squeezenet", tmp_path / "onnx", 2)
    (bundle,) = build_bundles(source, name="small", version=1, profiles=[PROFILE],
                              out_dir=tmp_path / "out", dynamic_batch=True, **LIGHT_BUILD)
    with open_bundle(bundle) as reader:
        manifest = reader.manifest
    assert manifest.format_version == FORMAT_VERSION and not manifest.external_data
    assert "external_data" not in manifest.to_dict()
    assert [f.path for f in manifest.files if f.path.startswith("artifacts/")] == [GRAPH]


def _tamper(bundle: Path, out: Path, member: str) -> Path:
    """A copy of ``bundle`` with one byte of ``member``'s data changed (sizes unchanged)."""
    shutil.copyfile(bundle, out)
    with tarfile.open(out) as tar:
        info = tar.getmember(member)
    with open(out, "r+b") as f:
        f.seek(info.offset_data + info.size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    return out


def test_a_changed_data_file_is_refused_naming_it(built: Built, tmp_path: Path) -> None:
    tampered = _tamper(built.bundle, tmp_path / "tampered.edgepkg", DATA)
    with open_bundle(tampered) as reader:
        reader.verify_signature([built.public])  # the manifest is untouched and still signed
        with pytest.raises(BundleError, match=r"file 'artifacts/onnxruntime/model\.onnx\.data' "
                                              r"does not match its manifest sha256"):
            reader.verify([built.public])
    # on the device: the agent re-hashes an extracted version's files at each load
    model_dir = tmp_path / "models" / "big" / "1"
    with open_bundle(built.bundle) as reader:
        reader.extract(model_dir)
    data = model_dir / DATA
    data.chmod(0o644)
    with open(data, "r+b") as f:
        f.seek(PAD_MIB * MIB // 2)
        f.write(b"\x00\x01")
    with pytest.raises(BundleError, match=r"'artifacts/onnxruntime/model\.onnx\.data' does not "
                                          r"match its manifest sha256"):
        load_manifest(model_dir)


def test_a_manifest_whose_version_and_external_data_disagree_is_refused(built: Built) -> None:
    with open_bundle(built.bundle) as reader:
        raw = reader.manifest.to_dict()
    with pytest.raises(BundleError, match="format_version 1 with 'external_data' must be 2"):
        Manifest.from_dict({**raw, "format_version": FORMAT_VERSION})
    no_data = {k: v for k, v in raw.items() if k != "external_data"}
    with pytest.raises(BundleError, match="format_version 2 needs 'external_data'"):
        Manifest.from_dict(no_data)
    with pytest.raises(BundleError, match="format_version 3 is not supported"):
        Manifest.from_dict({**raw, "format_version": 3})


def _install(built: Built, state: Path) -> None:
    with open_bundle(built.bundle) as reader:
        reader.verify([built.public])
        reader.extract(state / "models" / "big" / "1")


def _expected(source: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"data_0": x})[0])


def test_it_loads_under_a_budget_with_the_measured_peak_within_it(built: Built,
                                                                  tmp_path: Path) -> None:
    state = tmp_path / "state"
    _install(built, state)
    weights = PAD_MIB * MIB
    budget = int(weights * 1.5)  # 1.5 models, as in issue 28's scenario
    on_demand = ModelOverrides(load="on-demand", instances=1, isolation="thread")
    dp = DataPlane(state, overrides={"big": on_demand}, memory_budget_bytes=budget)
    x = np.random.default_rng(3).standard_normal((1, 3, 224, 224)).astype(np.float32)
    try:
        out = dp.infer(InferRequest("big", {"data_0": x}), timeout_s=600)
        np.testing.assert_allclose(out.outputs["softmaxout_1"], _expected(built.source, x),
                                   atol=1e-5)
        peak = dp.orchestrator.load_peak_of("big", 1)
        figure, origin = dp.orchestrator.memory_of("big", 1)
    finally:
        dp.close()
    assert origin == "measured on this device"
    assert peak is not None and 0 < figure <= peak
    # the agent's own figures: what the load added at its peak, and what the model kept
    assert peak <= budget * 1.10, f"load peak {peak / MIB:.0f} MiB, budget {budget / MIB:.0f} MiB"
    assert figure <= budget


def test_a_runtime_process_serves_it_under_a_budget(built: Built, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _install(built, state)
    isolated = ModelOverrides(load="on-demand", instances=1, isolation="process")
    dp = DataPlane(state, overrides={"big": isolated}, memory_budget_bytes=1024 * MIB)
    x = np.random.default_rng(4).standard_normal((1, 3, 224, 224)).astype(np.float32)
    try:
        out = dp.infer(InferRequest("big", {"data_0": x}), timeout_s=600)
        np.testing.assert_allclose(out.outputs["softmaxout_1"], _expected(built.source, x),
                                   atol=1e-5)
        # served by a runtime process of its own, which mapped the data file
        maps = [m.path for child in psutil.Process().children(recursive=True)
                for m in child.memory_maps()]
        assert any(p.endswith("model.onnx.data") for p in maps), maps
    finally:
        dp.close()


def _graph_reading(location: str) -> bytes:
    """A graph of the padded CNN's signature whose one weight is external data at
    ``location``."""
    from onnx import TensorProto, helper

    weight = helper.make_tensor("w", TensorProto.FLOAT, [1], [0.0])
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "4")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["data_0"], ["m"], axes=[2, 3], keepdims=1),
         helper.make_node("Tile", ["m", "reps"], ["t"]),
         helper.make_node("Add", ["t", "w"], ["softmaxout_1"])], "reads-outside",
        [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, [-1, 3, 224, 224])],
        [helper.make_tensor_value_info("softmaxout_1", TensorProto.FLOAT, [-1, 1000, 1, 1])],
        [weight, helper.make_tensor("reps", TensorProto.INT64, [4], [1, 334, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return bytes(model.SerializeToString())


def test_a_graph_naming_a_file_outside_its_version_is_not_loaded(built: Built,
                                                                 tmp_path: Path) -> None:
    import dataclasses

    from packager.bundle.manifest import MANIFEST_NAME, SIGNATURE_NAME
    from packager.bundle.writer import file_entries

    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\x00\x00\x80\x3f")
    state = tmp_path / "state"
    _install(built, state)
    version = state / "models" / "big" / "1"
    graph = version / GRAPH
    graph.chmod(0o644)
    graph.write_bytes(_graph_reading(str(Path("..") / ".." / ".." / ".." / ".." / ".."
                                         / secret.name)))
    manifest = Manifest.from_json((version / MANIFEST_NAME).read_bytes())
    (version / SIGNATURE_NAME).unlink()
    staged = [e for e in file_entries(version) if e.path != MANIFEST_NAME]
    (version / MANIFEST_NAME).write_bytes(
        dataclasses.replace(manifest, files=tuple(staged)).canonical_bytes())
    on_demand = ModelOverrides(load="on-demand", instances=1, isolation="thread")
    dp = DataPlane(state, overrides={"big": on_demand}, memory_budget_bytes=1024 * MIB)
    try:
        with pytest.raises(Exception, match="escapes model directory"):
            dp.infer(InferRequest("big", {"data_0": np.zeros((1, 3, 224, 224), np.float32)}),
                     timeout_s=600)
    finally:
        dp.close()
