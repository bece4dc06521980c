"""The JPEG -> labels pipeline of examples/pipeline (Pillow decode and resize in a Python step,
a real CNN, top-5 BYTES labels in a Python step) on a real agent, through the unmodified
tritonclient over TCP and the Unix socket, against the same steps computed here."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image

from packager.build import build_bundles
from tests.pipelines.conftest import EXAMPLE, PROFILE, Agent, Built, build, running_agent
from tests.support.model_factory import LIGHT_BUILD, varied_light_model

import jpeg_prep  # isort: skip  (examples/pipeline, on the path through the conftest)
import topk  # isort: skip


def jpeg(seed: int) -> bytes:
    """A 640x480 camera-like JPEG: smooth colour gradients plus noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:480, 0:640].astype(np.float32)
    channels = [np.sin(xx / rng.uniform(20, 120) + rng.uniform(0, 6))
                * np.cos(yy / rng.uniform(20, 120)) for _ in range(3)]
    image = (np.stack(channels, -1) * 100 + 128 + rng.normal(0, 8, (480, 640, 3)))
    out = io.BytesIO()
    Image.fromarray(image.clip(0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_light_model("squeezenet", tmp_path_factory.mktemp("cnn"))


@pytest.fixture(scope="module")
def agent(built: Built, cnn: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    out = tmp_path_factory.mktemp("jpeg-bundles")
    (squeezenet,) = build_bundles(cnn, name="squeezenet", version=1, profiles=[PROFILE],
                                  out_dir=out, key_path=built.private_key, dynamic_batch=True,
                                  max_batch=8, **LIGHT_BUILD)
    bundles = [squeezenet] + [build(EXAMPLE / f"{name}.toml", 1, out, built.private_key)
                              for name in ("jpeg_prep", "topk", "classify_jpeg")]
    with running_agent(tmp_path_factory.mktemp("agent"), built.public_key) as running:
        for bundle in bundles:
            result = running.deploy(bundle)
            assert result.ok, result.message
        yield running


def local(cnn: Path, images: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline's steps computed here: the example's functions and ONNX Runtime."""
    session = ort.InferenceSession(str(cnn), providers=["CPUExecutionProvider"])
    batch = np.array([[image] for image in images], dtype=object)
    pixels = jpeg_prep.preprocess({"JPEG": batch}, None)["PIXELS"]
    scores = np.concatenate([session.run(None, {"data_0": p[None]})[0] for p in pixels])
    answer = topk.topk({"SCORES": scores}, None)
    return answer["LABELS"], answer["TOP"]


@pytest.mark.parametrize("transport", ["tcp", "uds"])
def test_jpeg_to_labels_matches_the_steps_computed_here(agent: Agent, cnn: Path,
                                                        transport: str) -> None:
    images = [jpeg(seed) for seed in range(4)]
    want_labels, want_top = local(cnn, images)
    assert len({tuple(row) for row in want_labels}) > 1  # the images get different answers
    url = agent.tcp if transport == "tcp" else agent.uds
    with grpcclient.InferenceServerClient(url) as client:
        inp = grpcclient.InferInput("JPEG", [len(images), 1], "BYTES")
        inp.set_data_from_numpy(np.array([[image] for image in images], dtype=object))
        result = client.infer("classify_jpeg", [inp], client_timeout=120)
        labels, top = result.as_numpy("LABELS"), result.as_numpy("TOP")
        stats = client.get_inference_statistics("classify_jpeg", as_json=True)
    assert labels.tolist() == want_labels.tolist()
    assert all(label.startswith(b"class-") for label in labels.reshape(-1))
    np.testing.assert_allclose(top, want_top, rtol=1e-4, atol=1e-6)
    assert int(stats["model_stats"][0]["inference_count"]) >= len(images)


def test_a_jpeg_that_is_not_one_names_the_step(agent: Agent) -> None:
    from tritonclient.utils import InferenceServerException

    with grpcclient.InferenceServerClient(agent.uds) as client:
        inp = grpcclient.InferInput("JPEG", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[b"not a jpeg"]], dtype=object))
        with pytest.raises(InferenceServerException) as err:
            client.infer("classify_jpeg", [inp], client_timeout=120)
        assert "step 1 (model 'jpeg_prep')" in str(err.value)
        assert "UnidentifiedImageError" in str(err.value)
