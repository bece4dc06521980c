"""Input formats: ``edge-pack build --input-format NAME=NCHW`` (ONNX) and a spec's
``input_formats`` (Python model) land in the manifest and are reported in ModelConfig as
Triton's FORMAT_NCHW / FORMAT_NHWC over gRPC and HTTP, through the unmodified tritonclient
(what ``image_client.py`` reads); bad values are refused at build time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from onnx import TensorProto, helper

from edge_agent.cli import main as agent_cli
from packager.bundle.errors import BundleError, UsageError
from packager.bundle.manifest import Manifest
from packager.bundle.reader import open_bundle
from packager.bundle.signing import generate_keypair
from packager.cli import main as pack_cli
from packager.spec_build import build_spec_bundles
from tests.shmwords.conftest import PROFILE, Agent, serving

IMAGE_SPEC = '''\
name = "hwc_mean"
kind = "python"
source = ["hwc_mean.py"]
entry = "hwc_mean:mean"
max_batch_size = 4
input_formats = { IMG = "NHWC" }
[[inputs]]
name = "IMG"
datatype = "FP32"
shape = [4, 4, 3]
[[outputs]]
name = "MEAN"
datatype = "FP32"
shape = [3]
'''


def _pool_model(path: Path) -> Path:
    """A tiny image model: FP32 ``image`` [batch, 3, 8, 8] -> channel means ``out`` [batch, 3]."""
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["image"], ["pooled"]),
         helper.make_node("Flatten", ["pooled"], ["out"])],
        "pool",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _build_pool(root: Path, *flags: str) -> int:
    return pack_cli(["build", str(_pool_model(root / "pool.onnx")), "--name", "pool",
                     "--version", "1", "--profile", PROFILE, "--out", str(root / "out"),
                     "--quiet", *flags])


@pytest.fixture(scope="module")
def image_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    root = tmp_path_factory.mktemp("formats")
    assert _build_pool(root, "--input-format", "image=NCHW") == 0
    private, public = generate_keypair(root / "keys")
    (root / "hwc_mean.py").write_text(
        "def mean(inputs, ctx):\n    return {'MEAN': inputs['IMG'].mean(axis=(1, 2))}\n")
    (root / "hwc_mean.toml").write_text(IMAGE_SPEC)
    (python_bundle,) = build_spec_bundles(root / "hwc_mean.toml", name=None, version=1,
                                          profiles=[PROFILE], out_dir=root / "out",
                                          key_path=private)
    state = root / "state"
    for bundle in (python_bundle, *(root / "out").glob("pool-*.edgepkg")):
        assert agent_cli(["add-bundle", "--state-dir", str(state), "--pubkey", str(public),
                          "--allow-unsigned", str(bundle)]) == 0
    with serving(state, None, "formats-agent") as served:
        yield served


@pytest.mark.parametrize(("model", "tensor", "expected"),
                         [("pool", "image", "FORMAT_NCHW"), ("hwc_mean", "IMG", "FORMAT_NHWC")])
def test_model_config_reports_the_declared_format(image_agent: Agent, model: str, tensor: str,
                                                  expected: str) -> None:
    with tg.InferenceServerClient(image_agent.grpc) as grpc_client:
        config = grpc_client.get_model_config(model, as_json=True)["config"]
    (grpc_input,) = config["input"]
    assert (grpc_input["name"], grpc_input["format"]) == (tensor, expected)
    http_client = th.InferenceServerClient(image_agent.http)
    try:
        (http_input,) = http_client.get_model_config(model)["input"]
    finally:
        http_client.close()
    assert (http_input["name"], http_input["format"]) == (tensor, expected)


def test_without_a_format_the_manifest_keeps_its_bytes_and_config_says_none(
        agent: Agent, tmp_path: Path) -> None:
    assert _build_pool(tmp_path) == 0
    (bundle,) = (tmp_path / "out").glob("pool-*.edgepkg")
    with open_bundle(bundle) as reader:
        assert reader.manifest.input_formats == {}
        assert b"input_formats" not in reader.manifest.canonical_bytes()
    with tg.InferenceServerClient(agent.grpc) as client:
        config = client.get_model_config("simple_string").config
    assert [i.format for i in config.input] == [0, 0]  # FORMAT_NONE


@pytest.mark.parametrize(("flag", "error"), [
    ("image=NCWH", "input format 'NCWH' for 'image' must be one of NCHW, NHWC"),
    ("picture=NCHW", "input format for 'picture': the model has no such input"),
    ("NCHW", "--input-format 'NCHW' must be NAME=FORMAT"),
])
def test_bad_input_format_flags_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            flag: str, error: str) -> None:
    assert _build_pool(tmp_path, "--input-format", flag) != 0
    assert error in capsys.readouterr().err
    assert not list((tmp_path / "out").glob("*.edgepkg"))


def test_a_format_needs_three_dims_and_a_spec_checks_it(tmp_path: Path) -> None:
    (tmp_path / "hwc_mean.py").write_text("def mean(inputs, ctx):\n    return {}\n")
    (tmp_path / "hwc_mean.toml").write_text(IMAGE_SPEC.replace("shape = [4, 4, 3]",
                                                               "shape = [48]"))
    with pytest.raises(UsageError, match=r"input_formats: input format NHWC for 'IMG': the "
                                        r"input has shape \[48\]"):
        build_spec_bundles(tmp_path / "hwc_mean.toml", name=None, version=1,
                           profiles=[PROFILE], out_dir=tmp_path / "out")


def test_a_manifest_with_a_bad_format_is_refused(tmp_path: Path) -> None:
    assert _build_pool(tmp_path, "--input-format", "image=NHWC") == 0
    (bundle,) = (tmp_path / "out").glob("pool-*.edgepkg")
    with open_bundle(bundle) as reader:
        d = reader.manifest.to_dict()
    assert d["input_formats"] == {"image": "NHWC"}
    d["input_formats"] = {"image": "CHW"}
    with pytest.raises(BundleError, match="input format 'CHW' for 'image' must be one of"):
        Manifest.from_dict(d)
