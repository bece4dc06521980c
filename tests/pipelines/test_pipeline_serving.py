"""The example pipeline (prep -> mlp -> post) deployed on a real agent and called through the
unmodified tritonclient over TCP and the Unix socket, against the same steps computed here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient

from tests.pipelines.conftest import Built, running_agent

import imaging  # isort: skip  (examples/pipeline, on the path through the conftest)
import post  # isort: skip
import prep  # isort: skip


def images(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [imaging.encode(rng.integers(0, 256, (48 + i, 64), dtype=np.uint8))
            for i in range(n)]


def local(built: Built, batch: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline's steps computed in this process: prep, ONNX Runtime, post."""
    feats = np.stack([prep.features(b) for b in batch])
    session = ort.InferenceSession(str(built.mlp_source), providers=["CPUExecutionProvider"])
    probs = session.run(None, {"input": feats})[0]
    out = post.topk({"PROBS": probs}, None)
    return out["LABELS"], out["SCORES"]


def call(url: str, batch: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    with grpcclient.InferenceServerClient(url) as client:
        data = np.array([[b] for b in batch], dtype=object)
        inp = grpcclient.InferInput("IMAGE", list(data.shape), "BYTES")
        inp.set_data_from_numpy(data)
        result = client.infer("classify", [inp])
        return result.as_numpy("LABELS"), result.as_numpy("SCORES")


@pytest.fixture(scope="module")
def agent(built: Built, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with running_agent(tmp_path_factory.mktemp("agent"), built.public_key) as running:
        for name in ("mlp", "prep", "post", "classify"):
            result = running.deploy(built.bundles[name])
            assert result.ok, (name, result.message)
        yield running


@pytest.mark.parametrize("transport", ["tcp", "uds"])
def test_pipeline_answers_as_the_steps_computed_locally(agent, built: Built,
                                                        transport: str) -> None:
    batch = images(3, seed=len(transport))
    url = agent.tcp if transport == "tcp" else agent.uds
    labels, scores = call(url, batch)
    want_labels, want_scores = local(built, batch)
    assert labels.tolist() == want_labels.tolist()
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-6)


def test_pipeline_is_a_model_with_ensemble_metadata_and_step_statistics(agent) -> None:
    with grpcclient.InferenceServerClient(agent.tcp) as client:
        call(agent.tcp, images(2))
        meta = client.get_model_metadata("classify", as_json=True)
        assert meta["platform"] == "ensemble"
        assert [i["name"] for i in meta["inputs"]] == ["IMAGE"]
        assert meta["inputs"][0]["datatype"] == "BYTES"
        config = client.get_model_config("classify", as_json=True)["config"]
        assert config["platform"] == "ensemble" and config["max_batch_size"] == 8
        assert client.get_model_config("prep", as_json=True)["config"]["max_batch_size"] == 8
        stats = client.get_inference_statistics(as_json=True)["model_stats"]
        counts = {s["name"]: int(s.get("inference_count", 0)) for s in stats}
        assert counts["classify"] >= 2 and counts["prep"] >= 2 and counts["post"] >= 2
        assert counts["mlp"] >= 2


def test_bad_image_names_the_step_and_other_requests_keep_working(agent) -> None:
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as err:
        call(agent.tcp, [b"not an image"])
    assert "step 1 (model 'prep')" in str(err.value) and "not an EPI image" in str(err.value)
    labels, _ = call(agent.tcp, images(1))
    assert labels.shape == (1, 3)


def test_rolling_back_a_member_is_followed_by_the_pipeline(agent, built: Built) -> None:
    batch = images(2, seed=9)
    before, _ = call(agent.tcp, batch)
    assert agent.deploy(built.bundles["mlp2"]).ok
    with agent.client() as c:
        assert c.rollback("mlp").ok
    after, _ = call(agent.tcp, batch)
    assert after.tolist() == before.tolist()
    assert Path(agent.state_dir).is_dir()
