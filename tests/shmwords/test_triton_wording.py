"""Errors that Triton's client examples match by text start with Triton's words and keep the
agent's advice after them, over gRPC and HTTP, through the unmodified tritonclient. Each test
names the example (``src/python/examples`` of triton-inference-server/client) whose check it
repeats."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.shmwords.conftest import Agent


def _inputs(client: Any) -> list[Any]:
    mod = tg if isinstance(client, tg.InferenceServerClient) else th
    inputs = []
    for i in (0, 1):
        inputs.append(mod.InferInput(f"INPUT{i}", [1, 16], "BYTES"))
        inputs[-1].set_data_from_numpy(np.array([[b"1"] * 16], dtype=object))
    return inputs


def _message(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(InferenceServerException) as err:
        call(*args, **kwargs)
    return str(err.value.message())


def test_unknown_model_in_metadata(client: Any) -> None:
    # simple_{grpc,http}_health_metadata.py: "Request for unknown model" not in message
    message = _message(client.get_model_metadata, "wrong_model_name")
    assert message.startswith("Request for unknown model: 'wrong_model_name' is not found")
    assert "'wrong_model_name' is not in the repository" in message  # the agent's own words


def test_unknown_model_in_inference(client: Any) -> None:
    # simple_http_infer_client.py, simple_http_aio_infer_client.py: message.startswith(...)
    message = _message(client.infer, "wrong_model_name", _inputs(client))
    assert message.startswith("Request for unknown model: 'wrong_model_name' is not found")
    assert "(models: simple_string)" in message


def test_unknown_version_in_inference(client: Any) -> None:
    message = _message(client.infer, "simple_string", _inputs(client), model_version="7")
    assert message.startswith("Request for unknown model: 'simple_string' version 7 is not "
                              "found")
    assert "has no version 7 (versions: [1])" in message


def test_a_version_that_is_not_a_number(client: Any) -> None:
    # grpc_explicit_int8_content_client.py: "failed to get model version from specified
    # version string 'wrong_specification'" in message
    message = _message(client.infer, "simple_string", _inputs(client),
                       model_version="wrong_specification")
    assert message.startswith("failed to get model version from specified version string "
                              "'wrong_specification'")
    assert "use a positive integer or leave it empty" in message


def test_unknown_model_in_load(client: Any) -> None:
    # simple_{grpc,http}_model_control.py: "failed to load" in message
    message = _message(client.load_model, "wrong_model_name")
    assert message.startswith("failed to load 'wrong_model_name'")
    assert "deploy it with edge-console" in message


def test_typed_contents_together_with_raw_contents(agent: Agent) -> None:
    # grpc_explicit_int_content_client.py: typed contents on every input and one raw entry
    request = service_pb2.ModelInferRequest(model_name="simple_string")
    for i in (0, 1):
        tensor = request.inputs.add(name=f"INPUT{i}", datatype="BYTES", shape=[1, 16])
        tensor.contents.bytes_contents.extend([b"1"] * 16)
    request.raw_input_contents.append(b"\x01\x00\x00\x001" * 16)
    with grpc.insecure_channel(agent.grpc) as channel, \
            pytest.raises(grpc.RpcError) as err:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert ("contents field must not be specified when using raw_input_contents for "
            "'INPUT0' for model 'simple_string'") in str(err.value)
    assert "use one form for every input" in str(err.value)
