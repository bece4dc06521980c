"""The unmodified tritonclient.grpc client against a real agent serving real bundles."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from tests.agent_grpc.conftest import Agent, Sources

# (model, version, input name, row shape, atol)
SERVED = [
    ("mlp", "1", "input", (64,), 1e-5),
    ("mlp", "2", "input", (64,), 1e-4),
    ("squeezenet", "1", "data_0", (3, 224, 224), 1e-4),
    ("squeezenet_ov", "1", "data_0", (3, 224, 224), 1e-3),
]


def _infer_input(name: str, x: np.ndarray) -> tc.InferInput:
    inp = tc.InferInput(name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def test_server_health_and_metadata(triton) -> None:
    assert triton.is_server_live()
    assert triton.is_server_ready()
    meta = triton.get_server_metadata()
    assert meta.name and meta.version
    assert triton.is_model_ready("mlp")
    assert triton.is_model_ready("mlp", "2")
    assert not triton.is_model_ready("no_such_model")


def test_model_metadata_and_config(triton) -> None:
    meta = triton.get_model_metadata("mlp", "1")
    assert meta.name == "mlp" and set(meta.versions) >= {"1", "2"}
    assert meta.platform == "onnxruntime_onnx"
    assert (meta.inputs[0].name, meta.inputs[0].datatype, list(meta.inputs[0].shape)) == \
        ("input", "FP32", [-1, 64])
    assert meta.outputs[0].name == "probs"
    config = triton.get_model_config("squeezenet_ov").config
    assert config.name == "squeezenet_ov" and config.backend == "openvino"
    assert config.max_batch_size > 1
    assert list(config.input[0].dims) == [3, 224, 224]  # without the batch dim
    assert config.input[0].data_type == tc.model_config_pb2.TYPE_FP32
    assert config.HasField("dynamic_batching")
    assert config.instance_group[0].count >= 1
    as_json = triton.get_model_config("mlp", "2", as_json=True)
    assert as_json["config"]["backend"] == "openvino"


@pytest.mark.parametrize(("model", "version", "name", "row", "atol"), SERVED)
def test_outputs_match_onnxruntime_on_the_source(triton, sources: Sources, model: str,
                                                  version: str, name: str, row, atol) -> None:
    x = np.random.default_rng(11).random((3, *row), dtype=np.float32)
    result = triton.infer(model, [_infer_input(name, x)], model_version=version)
    assert result.get_response().model_version == version
    out_name = result.get_response().outputs[0].name
    np.testing.assert_allclose(result.as_numpy(out_name), sources.reference(model, x),
                               atol=atol, rtol=1e-3)


def test_default_version_is_named_in_the_response(triton) -> None:
    x = np.zeros((1, 64), np.float32)
    response = triton.infer("mlp", [_infer_input("input", x)]).get_response()
    assert response.model_name == "mlp" and response.model_version in {"1", "2"}


def test_tritonclient_over_the_unix_socket(agent: Agent, sources: Sources) -> None:
    client = tc.InferenceServerClient(agent.uds_target)
    try:
        x = np.random.default_rng(2).random((2, 64), dtype=np.float32)
        result = client.infer("mlp", [_infer_input("input", x)], model_version="1",
                              outputs=[tc.InferRequestedOutput("probs")])
        np.testing.assert_allclose(result.as_numpy("probs"), sources.reference("mlp", x),
                                   atol=1e-5)
    finally:
        client.close()


def test_statistics_and_repository_index(triton) -> None:
    x = np.zeros((2, 64), np.float32)
    before = triton.get_inference_statistics("mlp", "1").model_stats[0].inference_count
    triton.infer("mlp", [_infer_input("input", x)], model_version="1")
    stats = triton.get_inference_statistics("mlp", "1").model_stats
    assert len(stats) == 1 and stats[0].name == "mlp" and stats[0].version == "1"
    assert stats[0].inference_count >= before + 2
    assert stats[0].inference_stats.success.count >= 1
    assert stats[0].execution_count >= 1 and stats[0].batch_stats
    everything = triton.get_inference_statistics().model_stats
    assert {(s.name, s.version) for s in everything} >= {("mlp", "1"), ("mlp", "2"),
                                                         ("squeezenet", "1")}
    index = triton.get_model_repository_index().models
    assert {(m.name, m.version, m.state) for m in index} >= {
        ("mlp", "1", "READY"), ("mlp", "2", "READY"), ("squeezenet_ov", "1", "READY")}


def test_unload_and_load(triton, sources: Sources) -> None:
    x = np.random.default_rng(5).random((1, 3, 224, 224), dtype=np.float32)
    triton.unload_model("squeezenet")
    assert not triton.is_model_ready("squeezenet")
    with pytest.raises(InferenceServerException) as err:
        triton.infer("squeezenet", [_infer_input("data_0", x)])
    assert err.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND")
    triton.load_model("squeezenet")
    assert triton.is_model_ready("squeezenet")
    out = triton.infer("squeezenet", [_infer_input("data_0", x)]).as_numpy("softmaxout_1")
    np.testing.assert_allclose(out, sources.reference("squeezenet", x), atol=1e-4)


def test_stream_infer(triton, sources: Sources) -> None:
    results: queue.Queue = queue.Queue()
    triton.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        rng = np.random.default_rng(9)
        sent = {}
        for i in range(8):
            x = rng.random((1 + i % 3, 64), dtype=np.float32)
            sent[f"req{i}"] = x
            triton.async_stream_infer("mlp", [_infer_input("input", x)], model_version="1",
                                      request_id=f"req{i}")
        triton.async_stream_infer("mlp", [_infer_input("input", np.zeros((1, 65), np.float32))],
                                  model_version="1", request_id="bad")
        triton.async_stream_infer("mlp", [_infer_input("input", sent["req0"])],
                                  model_version="1", request_id="after-bad")
        got, errors = {}, []
        for _ in range(10):
            result, error = results.get(timeout=60)
            if error is not None:
                errors.append(str(error))
            else:
                got[result.get_response().id] = result.as_numpy("probs")
    finally:
        triton.stop_stream()
    assert len(errors) == 1 and "'input'" in errors[0]
    assert set(got) == {*sent, "after-bad"}
    for rid, x in sent.items():
        np.testing.assert_allclose(got[rid], sources.reference("mlp", x), atol=1e-5)
