"""Triton's request options over both protocols, with the unmodified tritonclient (and a raw
request for tensor parameters it has no call for), against a real agent serving a
random-weight MLP as ``mlp`` (built with ``--labels``) and ``plain`` (no labels):

- no option is ignored: each one the agent does not serve is refused, naming the parameter,
  over gRPC (INVALID_ARGUMENT) and HTTP (400); the options it serves are applied;
- the classification extension answers the top N classes of each row, checked against numpy.
"""

from __future__ import annotations

import contextlib
import functools
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from packager.build import build_bundles
from packager.samples import make_mlp
from tests.support.harness import serving_bundles

ORT = "x86_64-cpu-onnxruntime"
X = np.random.default_rng(5).random((2, 64), dtype=np.float32)


LABELS = [f"class-{i}" for i in range(10)]


@dataclass
class Served:
    grpc: str
    http: str
    root: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A real agent in-process: gRPC and HTTP on 127.0.0.1:0, the MLP as ``mlp``."""
    root = tmp_path_factory.mktemp("request-options")
    mlp = make_mlp(root / "mlp.onnx", seed=9)
    labels = root / "labels.txt"
    labels.write_text("".join(f"{x}\n" for x in LABELS))
    bundles = build_bundles(mlp, name="mlp", version=1, profiles=[ORT], out_dir=root,
                            labels={"": labels})
    bundles += build_bundles(mlp, name="plain", version=1, profiles=[ORT], out_dir=root)
    with serving_bundles(root, bundles, name="request-options-agent") as agent:
        assert agent.addresses is not None and agent.addresses.http
        yield Served(grpc=agent.tcp, http=agent.addresses.http, root=root)


@pytest.fixture(scope="module")
def grpc_client(served: Served) -> Iterator[tg.InferenceServerClient]:
    with contextlib.closing(tg.InferenceServerClient(served.grpc)) as client:
        yield client


@pytest.fixture(scope="module")
def http_client(served: Served) -> Iterator[th.InferenceServerClient]:
    with contextlib.closing(th.InferenceServerClient(served.http)) as client:
        yield client


def _grpc_input() -> tg.InferInput:
    inp = tg.InferInput("input", list(X.shape), "FP32")
    inp.set_data_from_numpy(X)
    return inp


def _http_input() -> th.InferInput:
    inp = th.InferInput("input", list(X.shape), "FP32")
    inp.set_data_from_numpy(X)
    return inp


def _refused(call: Any, status: str, *names: str) -> str:
    with pytest.raises(InferenceServerException) as err:
        call()
    assert err.value.status() == status, err.value
    message = str(err.value.message())
    for name in names:
        assert f"'{name}'" in message, message
    return message


GRPC_REFUSED = "StatusCode.INVALID_ARGUMENT"
HTTP_REFUSED = "400"

# (tritonclient infer keyword arguments, the parameters the refusal must name)
CLIENT_OPTIONS = [
    pytest.param({"sequence_id": 7}, ("sequence_id", "sequence_start", "sequence_end"),
                 id="sequence_id"),
    pytest.param({"sequence_id": "corr-1", "sequence_start": True},
                 ("sequence_id", "sequence_start"), id="string-sequence_id-start"),
    pytest.param({"sequence_id": 7, "sequence_end": True}, ("sequence_end",),
                 id="sequence_end"),
    pytest.param({"parameters": {"foo": 1}}, ("foo",), id="unknown-int"),
    pytest.param({"parameters": {"max_tokens": "3", "bar": True}}, ("max_tokens", "bar"),
                 id="unknown-several"),
]


@pytest.mark.parametrize(("kwargs", "names"), CLIENT_OPTIONS)
def test_each_option_not_served_is_refused_by_name(grpc_client, http_client,
                                                   kwargs: dict[str, Any],
                                                   names: tuple[str, ...]) -> None:
    for call, status in ((functools.partial(grpc_client.infer, "mlp", [_grpc_input()]),
                          GRPC_REFUSED),
                         (functools.partial(http_client.infer, "mlp", [_http_input()]),
                          HTTP_REFUSED)):
        message = _refused(functools.partial(call, **kwargs), status, *names)
        if "sequence_id" in names:
            assert "not stateful" in message


def test_protocol_specific_options_are_refused_on_the_other_protocol(
        grpc_client, served: Served) -> None:
    # HTTP's binary data on gRPC; gRPC's stream flag on HTTP (sent as JSON by hand: newer
    # tritonclient.http refuses parameters named triton_* before sending them)
    _refused(lambda: grpc_client.infer("mlp", [_grpc_input()],
                                       parameters={"binary_data_size": 4}),
             GRPC_REFUSED, "binary_data_size")
    doc = {"inputs": [{"name": "input", "shape": list(X.shape), "datatype": "FP32",
                       "data": X.ravel().tolist()}],
           "parameters": {"triton_enable_empty_final_response": True}}
    request = urllib.request.Request(f"http://{served.http}/v2/models/mlp/infer",
                                     data=json.dumps(doc).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=60)
    assert err.value.code == 400
    message = str(json.loads(err.value.read())["error"])
    assert "'triton_enable_empty_final_response'" in message, message


def test_served_options_are_applied(grpc_client, http_client) -> None:
    expected = grpc_client.infer("mlp", [_grpc_input()]).as_numpy("probs")
    for result in (grpc_client.infer("mlp", [_grpc_input()], priority=1, timeout=10_000_000),
                   http_client.infer("mlp", [_http_input()], priority=1, timeout=10_000_000)):
        np.testing.assert_allclose(result.as_numpy("probs"), expected, rtol=1e-6)
    for bad in ({"priority": 1 << 40}, {"timeout": -1}):
        _refused(functools.partial(grpc_client.infer, "mlp", [_grpc_input()], **bad),
                 GRPC_REFUSED, *bad)
        _refused(functools.partial(http_client.infer, "mlp", [_http_input()], **bad),
                 HTTP_REFUSED, *bad)


# -- tensor parameters: tritonclient has no call that sets an arbitrary one ------------------


def _grpc_tensor_refusal(served: Served, where: str) -> str:
    msg = pb.ModelInferRequest(model_name="mlp")
    msg.inputs.add(name="input", datatype="FP32", shape=list(X.shape))
    msg.raw_input_contents.append(X.tobytes())
    out = msg.outputs.add(name="probs")
    tensor = msg.inputs[0] if where == "input" else out
    tensor.parameters["foo"].int64_param = 1
    tensor.parameters["binary_data"].bool_param = True
    with grpc.insecure_channel(served.grpc) as channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(msg, timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return str(err.value.details())


def _http_tensor_refusal(served: Served, where: str) -> str:
    doc: dict[str, Any] = {
        "inputs": [{"name": "input", "datatype": "FP32", "shape": list(X.shape),
                    "data": X.ravel().tolist()}],
        "outputs": [{"name": "probs"}]}
    tensor = doc["inputs"][0] if where == "input" else doc["outputs"][0]
    tensor["parameters"] = {"foo": 1, "triton_enable_empty_final_response": True}
    request = urllib.request.Request(f"http://{served.http}/v2/models/mlp/infer",
                                     data=json.dumps(doc).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=60)
    assert err.value.code == 400
    return str(json.loads(err.value.read())["error"])


@pytest.mark.parametrize("where", ["input", "output"])
def test_unknown_tensor_parameters_are_refused_by_name(served: Served, where: str) -> None:
    grpc_message = _grpc_tensor_refusal(served, where)
    assert "'foo'" in grpc_message and "'binary_data'" in grpc_message, grpc_message
    assert f"{where} 'input'" in grpc_message or f"{where} 'probs'" in grpc_message
    http_message = _http_tensor_refusal(served, where)
    assert "'foo'" in http_message and "'triton_enable_empty_final_response'" in http_message


# -- the classification extension ----------------------------------------------------------


def _top(probs: np.ndarray, k: int) -> list[list[tuple[float, int]]]:
    order = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    return [[(float(probs[r, i]), int(i)) for i in row] for r, row in enumerate(order)]


def _check_classes(answer: np.ndarray, probs: np.ndarray, k: int, labelled: bool) -> None:
    assert answer.shape == (len(probs), k)
    for row, expected in zip(answer, _top(probs, k), strict=True):
        for element, (value, index) in zip(row, expected, strict=True):
            text = element.decode() if isinstance(element, bytes) else element
            parts = text.split(":")
            assert int(parts[1]) == index, (text, expected)
            assert abs(float(parts[0]) - value) < 1e-6, (text, value)
            assert parts[2:] == ([LABELS[index]] if labelled else []), text


@pytest.mark.parametrize(("model", "k"), [("mlp", 3), ("plain", 1), ("mlp", 25)])
def test_classification_is_the_top_k_of_each_row(grpc_client, http_client, model: str,
                                                 k: int) -> None:
    probs = grpc_client.infer(model, [_grpc_input()]).as_numpy("probs")
    assert probs.shape == (2, 10) and not np.array_equal(probs[0], probs[1])
    labelled, want = model == "mlp", min(k, 10)
    result = grpc_client.infer(model, [_grpc_input()],
                               outputs=[tg.InferRequestedOutput("probs", class_count=k)])
    assert result.get_output("probs").datatype == "BYTES"
    _check_classes(result.as_numpy("probs"), probs, want, labelled)
    for binary in (True, False):
        answer = http_client.infer(model, [_http_input()], outputs=[
            th.InferRequestedOutput("probs", binary_data=binary, class_count=k)])
        assert answer.get_output("probs")["datatype"] == "BYTES"
        _check_classes(answer.as_numpy("probs"), probs, want, labelled)


def test_classification_over_a_grpc_stream(grpc_client) -> None:
    probs = grpc_client.infer("mlp", [_grpc_input()]).as_numpy("probs")
    answers: list[Any] = []
    grpc_client.start_stream(callback=lambda result, error: answers.append((result, error)))
    try:
        grpc_client.async_stream_infer("mlp", [_grpc_input()], outputs=[
            tg.InferRequestedOutput("probs", class_count=2)])
    finally:
        grpc_client.stop_stream()  # waits for the answer
    [(result, error)] = answers
    assert error is None
    _check_classes(result.as_numpy("probs"), probs, 2, labelled=True)


def test_model_config_names_the_label_file(grpc_client, http_client) -> None:
    config = grpc_client.get_model_config("mlp", as_json=True)["config"]
    assert config["output"][0]["label_filename"] == "labels/probs.txt"
    assert http_client.get_model_config("mlp")["output"][0]["label_filename"] == \
        "labels/probs.txt"
    assert "label_filename" not in http_client.get_model_config("plain")["output"][0]


def test_a_classification_output_cannot_go_to_shared_memory(served: Served) -> None:
    doc = {"inputs": [{"name": "input", "datatype": "FP32", "shape": list(X.shape),
                       "data": X.ravel().tolist()}],
           "outputs": [{"name": "probs", "parameters": {
               "classification": 2, "shared_memory_region": "r",
               "shared_memory_byte_size": 64}}]}
    request = urllib.request.Request(f"http://{served.http}/v2/models/mlp/infer",
                                     data=json.dumps(doc).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=60)
    assert err.value.code == 400
    assert "shared memory" in json.loads(err.value.read())["error"]


# -- server metadata -------------------------------------------------------------------------


def test_server_metadata_lists_exactly_the_extensions_served(grpc_client, http_client) -> None:
    served = {"classification", "sequence", "schedule_policy", "model_configuration",
              "statistics", "logging", "trace"}
    # model control is off on this agent: no model_repository; HTTP adds its binary data;
    # system shared memory is not served over TCP or HTTP unless configured (it is not here)
    assert set(grpc_client.get_server_metadata().extensions) == served
    http_extensions = http_client.get_server_metadata()["extensions"]
    assert set(http_extensions) == served | {"binary_tensor_data"}
    assert len(http_extensions) == len(served) + 1
