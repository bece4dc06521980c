"""The unmodified tritonclient.http client against a real agent: the checks the gRPC client
passes (tests/agent_grpc/test_tritonclient.py), over KServe v2 REST."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from tests.agent_grpc.conftest import Sources
from tests.agent_http.conftest import HttpAgent

# (model, version, input name, row shape, atol)
SERVED = [
    ("mlp", "1", "input", (64,), 1e-5),
    ("mlp", "2", "input", (64,), 1e-4),
    ("squeezenet", "1", "data_0", (3, 224, 224), 1e-4),
    ("squeezenet_ov", "1", "data_0", (3, 224, 224), 1e-3),
]


def _input(name: str, x: np.ndarray, binary: bool = True) -> th.InferInput:
    inp = th.InferInput(name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    return inp


def test_server_health_and_metadata(triton_http) -> None:
    assert triton_http.is_server_live()
    assert triton_http.is_server_ready()
    meta = triton_http.get_server_metadata()
    assert meta["name"] and meta["version"]
    assert {"statistics", "model_repository"} <= set(meta["extensions"])
    assert triton_http.is_model_ready("mlp")
    assert triton_http.is_model_ready("mlp", "2")
    assert not triton_http.is_model_ready("no_such_model")


def test_model_metadata_and_config(triton_http) -> None:
    meta = triton_http.get_model_metadata("mlp", "1")
    assert meta["name"] == "mlp" and set(meta["versions"]) >= {"1", "2"}
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert meta["outputs"][0]["name"] == "probs"
    config = triton_http.get_model_config("squeezenet_ov")
    assert config["name"] == "squeezenet_ov" and config["backend"] == "openvino"
    assert config["max_batch_size"] > 1
    assert [int(d) for d in config["input"][0]["dims"]] == [3, 224, 224]
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert "dynamic_batching" in config
    assert config["instance_group"][0]["count"] >= 1
    with pytest.raises(InferenceServerException) as err:
        triton_http.get_model_metadata("no_such_model")
    assert "no_such_model" in str(err.value)


@pytest.mark.parametrize(("model", "version", "name", "row", "atol"), SERVED)
def test_outputs_match_onnxruntime_on_the_source(triton_http, sources: Sources, model: str,
                                                  version: str, name: str, row, atol) -> None:
    x = np.random.default_rng(11).random((3, *row), dtype=np.float32)
    result = triton_http.infer(model, [_input(name, x)], model_version=version)
    response = result.get_response()
    assert response["model_version"] == version
    out_name = response["outputs"][0]["name"]
    np.testing.assert_allclose(result.as_numpy(out_name), sources.reference(model, x),
                               atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("binary_in", "binary_out"), [(False, False), (True, False),
                                                       (False, True)])
def test_json_and_binary_tensors(triton_http, sources: Sources, binary_in: bool,
                                 binary_out: bool) -> None:
    x = np.random.default_rng(4).random((2, 64), dtype=np.float32)
    result = triton_http.infer("mlp", [_input("input", x, binary_in)], model_version="1",
                               outputs=[th.InferRequestedOutput("probs",
                                                                binary_data=binary_out)],
                               request_id="r-42")
    response = result.get_response()
    assert response["id"] == "r-42"
    assert ("data" in response["outputs"][0]) is not binary_out
    np.testing.assert_allclose(result.as_numpy("probs"), sources.reference("mlp", x),
                               atol=1e-5)


def test_default_version_is_named_in_the_response(triton_http) -> None:
    x = np.zeros((1, 64), np.float32)
    response = triton_http.infer("mlp", [_input("input", x)]).get_response()
    assert response["model_name"] == "mlp" and response["model_version"] in {"1", "2"}


def test_async_infer(triton_http, sources: Sources) -> None:
    rng = np.random.default_rng(8)
    xs = [rng.random((1, 64), dtype=np.float32) for _ in range(4)]
    pending = [triton_http.async_infer("mlp", [_input("input", x)], model_version="1")
               for x in xs]
    for x, call in zip(xs, pending, strict=True):
        np.testing.assert_allclose(call.get_result(timeout=60).as_numpy("probs"),
                                   sources.reference("mlp", x), atol=1e-5)


def test_statistics_and_repository_index(triton_http) -> None:
    x = np.random.default_rng(21).random((2, 64), dtype=np.float32)
    before = triton_http.get_inference_statistics("mlp", "1")["model_stats"][0]
    triton_http.infer("mlp", [_input("input", x)], model_version="1")
    stats = triton_http.get_inference_statistics("mlp", "1")["model_stats"]
    assert len(stats) == 1 and stats[0]["name"] == "mlp" and stats[0]["version"] == "1"
    assert stats[0]["inference_count"] >= before["inference_count"] + 2
    assert stats[0]["inference_stats"]["success"]["count"] >= 1
    assert isinstance(stats[0]["inference_stats"]["queue"]["ns"], int)
    assert stats[0]["execution_count"] >= 1 and stats[0]["batch_stats"]
    everything = triton_http.get_inference_statistics()["model_stats"]
    assert {(s["name"], s["version"]) for s in everything} >= {("mlp", "1"), ("mlp", "2"),
                                                               ("squeezenet", "1")}
    index = triton_http.get_model_repository_index()
    assert {(m["name"], m["version"], m["state"]) for m in index} >= {
        ("mlp", "1", "READY"), ("mlp", "2", "READY"), ("squeezenet_ov", "1", "READY")}


def test_unload_and_load(triton_http, sources: Sources) -> None:
    x = np.random.default_rng(5).random((1, 3, 224, 224), dtype=np.float32)
    triton_http.unload_model("squeezenet")
    assert not triton_http.is_model_ready("squeezenet")
    with pytest.raises(InferenceServerException) as err:
        triton_http.infer("squeezenet", [_input("data_0", x)])
    assert err.value.status() in ("503", "404")
    triton_http.load_model("squeezenet")
    assert triton_http.is_model_ready("squeezenet")
    out = triton_http.infer("squeezenet", [_input("data_0", x)]).as_numpy("softmaxout_1")
    np.testing.assert_allclose(out, sources.reference("squeezenet", x), atol=1e-4)


def test_load_with_a_config_field_the_agent_cannot_change_is_refused(triton_http) -> None:
    with pytest.raises(InferenceServerException) as err:
        triton_http.load_model("mlp", config='{"backend": "python"}')
    assert err.value.status() == "400" and "'config'" in str(err.value)
    assert "'backend'" in str(err.value)
    assert triton_http.is_model_ready("mlp")


def test_errors_name_what_is_wrong(triton_http) -> None:
    with pytest.raises(InferenceServerException) as err:
        triton_http.infer("mlp", [_input("input", np.zeros((1, 65), np.float32))],
                          model_version="1")
    assert err.value.status() == "400" and "'input'" in str(err.value)
    with pytest.raises(InferenceServerException) as err:
        triton_http.infer("nope", [_input("input", np.zeros((1, 64), np.float32))])
    assert err.value.status() == "404" and "nope" in str(err.value)


def test_system_shared_memory(triton_http, sources: Sources, http_agent: HttpAgent) -> None:
    import tritonclient.utils.shared_memory as shm

    x = np.random.default_rng(6).random((2, 64), dtype=np.float32)
    out_bytes = 2 * 10 * 4
    key = f"/edge-http-test-{id(x)}"
    handle = shm.create_shared_memory_region("http_io", key, x.nbytes + out_bytes)
    try:
        shm.set_shared_memory_region(handle, [x])
        triton_http.register_system_shared_memory("http_io", key, x.nbytes + out_bytes)
        status = triton_http.get_system_shared_memory_status("http_io")
        assert status[0]["name"] == "http_io" and status[0]["byte_size"] == x.nbytes + out_bytes
        inp = th.InferInput("input", [2, 64], "FP32")
        inp.set_shared_memory("http_io", x.nbytes)
        out = th.InferRequestedOutput("probs", binary_data=False)
        out.set_shared_memory("http_io", out_bytes, offset=x.nbytes)
        result = triton_http.infer("mlp", [inp], model_version="1", outputs=[out])
        assert result.get_output("probs")["shape"] == [2, 10]
        # no parameters on an output in shared memory, as Triton answers (Triton's C++ client
        # reads binary_data_size from any output that has parameters)
        assert "parameters" not in result.get_output("probs")
        got = shm.get_contents_as_numpy(handle, np.float32, [2, 10], offset=x.nbytes)
        np.testing.assert_allclose(got, sources.reference("mlp", x), atol=1e-5)
        # one set of regions for both front ends: gRPC sees what HTTP registered
        import tritonclient.grpc as tc

        grpc_client = tc.InferenceServerClient(http_agent.grpc)
        try:
            regions = grpc_client.get_system_shared_memory_status().regions
            assert "http_io" in regions
        finally:
            grpc_client.close()
        triton_http.unregister_system_shared_memory("http_io")
        assert triton_http.get_system_shared_memory_status() == []
    finally:
        shm.destroy_shared_memory_region(handle)
