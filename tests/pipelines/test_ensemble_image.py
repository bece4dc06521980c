"""Triton's ensemble image example's request against the pipeline the conformance harness
builds for it (packager/triton_samples.py ``write_ensemble_models``), with a small CNN: raw image
file bytes as BYTES [N, 1] in, classification (top 3 of ``OUTPUT``, with labels) out, through the
unmodified tritonclient over gRPC and HTTP, against the same steps computed here."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image

from packager.build import build_bundles
from packager.samples import make_cnn
from packager.triton_samples import ENSEMBLE, write_ensemble_models
from tests.pipelines.conftest import PROFILE, Agent, Built, running_agent

SIZE, CLASSES, TOP = 16, 10, 3


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("ensemble")
    cnn = make_cnn(root / "cnn.onnx", size=SIZE, classes=CLASSES, seed=3)
    return root, write_ensemble_models(root, cnn=cnn, cnn_input="image", cnn_output="logits",
                                       classes=CLASSES, size=SIZE, channels=1)


@pytest.fixture(scope="module")
def agent(built: Built, models: tuple[Path, list],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    root, specs = models
    bundles = []
    for model in specs:  # members first: the pipeline is checked against them at deploy
        onnx = model.source.suffix == ".onnx"
        bundles += build_bundles(model.source, name=model.name if onnx else "", version=1,
                                 profiles=[PROFILE], out_dir=root / "bundles",
                                 key_path=built.private_key, max_batch=model.max_batch)
    with running_agent(tmp_path_factory.mktemp("agent"), built.public_key,
                       http=True) as running:
        for bundle in bundles:
            result = running.deploy(bundle)
            assert result.ok, result.message
        yield running


def image_files(tmp: Path) -> list[Path]:
    """Two image files as a user has them: a PNG and a JPEG of different content."""
    rng = np.random.default_rng(11)
    paths = []
    for i, fmt in enumerate(("PNG", "JPEG")):
        pixels = rng.integers(0, 256, (40 + 8 * i, 48, 3), dtype=np.uint8)
        path = tmp / f"image{i}.{fmt.lower()}"
        Image.fromarray(pixels).save(path, fmt)
        paths.append(path)
    return paths


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_preprocess_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected(models: tuple[Path, list], batch: np.ndarray) -> list[list[str]]:
    """Top-3 ``value:index:label`` per row, from the written step code and ONNX Runtime."""
    root, _ = models
    prep = _module(root / "image_preprocess" / "image_preprocess.py")
    pixels = prep.preprocess({"INPUT": batch.astype(object)}, None)["OUTPUT"]
    session = ort.InferenceSession(str(root / "cnn.onnx"), providers=["CPUExecutionProvider"])
    scores = session.run(None, {"image": pixels})[0]
    rows = []
    for row in scores:
        top = np.argsort(-row, kind="stable")[:TOP]
        rows.append([f"{row[i]}:{i}:class_{i}" for i in top])
    return rows


def _request(files: list[Path]) -> np.ndarray:
    """What ensemble_image_client.py sends: each file's bytes, stacked to [N, 1]."""
    data = [np.array([f.read_bytes()], dtype=bytes) for f in files]
    return np.stack(data, axis=0)


def _parsed(rows: np.ndarray) -> list[list[tuple[float, int, str]]]:
    out = []
    for row in rows:
        entries = []
        for item in row:
            value, index, label = (item.decode() if isinstance(item, bytes) else item).split(":")
            entries.append((float(value), int(index), label))
        out.append(entries)
    return out


def _check(got: np.ndarray, want: list[list[str]]) -> None:
    assert got.shape == (len(want), TOP)
    assert len({tuple(row) for row in want}) == len(want)  # the images get different answers
    got_rows, want_rows = _parsed(got), _parsed(np.array(want, dtype=object))
    for g, w in zip(got_rows, want_rows, strict=True):
        assert [(i, label) for _, i, label in g] == [(i, label) for _, i, label in w]
        np.testing.assert_allclose([v for v, _, _ in g], [v for v, _, _ in w], rtol=1e-4,
                                   atol=1e-5)


def test_grpc_ensemble_request_as_the_example_sends_it(agent: Agent, models: tuple[Path, list],
                                                       tmp_path: Path) -> None:
    batch = _request(image_files(tmp_path))
    with grpcclient.InferenceServerClient(agent.tcp) as client:
        meta = client.get_model_metadata(ENSEMBLE)
        config = client.get_model_config(ENSEMBLE).config
        assert len(meta.inputs) == 1 and len(config.input) == 1
        assert config.max_batch_size >= len(batch)
        assert config.output[0].label_filename == "labels/OUTPUT.txt"
        inp = grpcclient.InferInput(meta.inputs[0].name, batch.shape, "BYTES")
        inp.set_data_from_numpy(batch)
        outputs = [grpcclient.InferRequestedOutput(o.name, class_count=TOP)
                   for o in meta.outputs]
        result = client.infer(ENSEMBLE, [inp], outputs=outputs, client_timeout=120)
        got = result.as_numpy(meta.outputs[0].name)
    assert got is not None
    _check(got, expected(models, batch))


def test_http_ensemble_request_as_the_example_sends_it(agent: Agent, models: tuple[Path, list],
                                                       tmp_path: Path) -> None:
    assert agent.addresses is not None and agent.addresses.http
    batch = _request(image_files(tmp_path))
    client = httpclient.InferenceServerClient(agent.addresses.http)
    try:
        meta = client.get_model_metadata(ENSEMBLE)
        config = client.get_model_config(ENSEMBLE)
        assert len(meta["inputs"]) == 1 and len(config["input"]) == 1
        assert config["max_batch_size"] >= len(batch)
        inp = httpclient.InferInput(meta["inputs"][0]["name"], list(batch.shape), "BYTES")
        inp.set_data_from_numpy(batch, binary_data=True)
        outputs = [httpclient.InferRequestedOutput(o["name"], binary_data=True,
                                                   class_count=TOP) for o in meta["outputs"]]
        result = client.infer(ENSEMBLE, [inp], outputs=outputs)
        got = result.as_numpy(meta["outputs"][0]["name"])
    finally:
        client.close()
    assert got is not None
    _check(got, expected(models, batch))


def test_a_file_that_is_no_image_names_the_step(agent: Agent) -> None:
    from tritonclient.utils import InferenceServerException

    with grpcclient.InferenceServerClient(agent.tcp) as client:
        inp = grpcclient.InferInput("INPUT", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[b"not an image"]], dtype=object))
        with pytest.raises(InferenceServerException) as err:
            client.infer(ENSEMBLE, [inp], client_timeout=120)
    assert "model 'image_preprocess'" in str(err.value)
    assert "UnidentifiedImageError" in str(err.value)

