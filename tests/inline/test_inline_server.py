"""edge_agent.inline: functions bound in-process, called with the unmodified tritonclient over
gRPC (TCP and a Unix socket) and HTTP; PyTriton's decorators; errors answered INTERNAL/500."""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from edge_agent.inline import (
    BindError,
    FunctionServer,
    Tensor,
    batch,
    fill_optionals,
    first_value,
    group_by_values,
    sample,
    signature,
)
from edge_agent.inline.decorators import _rows


@signature(inputs=[Tensor("x", np.float32, (4,))], outputs=[Tensor("y", np.float32, (4,))],
           max_batch_size=16)
@batch
def double(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": x * 2}


@batch
@group_by_values("mode")
@first_value("mode")
def shift(x: np.ndarray, mode: np.ndarray) -> dict[str, np.ndarray]:
    # every call sees one mode (a scalar int32): grouped, then its first value
    assert np.ndim(mode) == 0
    return {"y": x + np.float32(mode) * 100}


@sample
def echo_text(text: np.ndarray) -> dict[str, np.ndarray]:
    assert text.dtype == object and isinstance(text.reshape(-1)[0], bytes)
    return {"upper": np.array([[t.upper() for t in text.reshape(-1)]], dtype=object)}


@batch
def broken(x: np.ndarray) -> dict[str, np.ndarray]:
    raise ValueError("the weights are not loaded")


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[FunctionServer]:
    with FunctionServer(address="127.0.0.1:0", uds=tmp_path / "i.sock",
                        http="127.0.0.1:0") as srv:
        srv.bind("double", double)
        srv.bind("shift", shift, inputs=[Tensor("x", np.float32, (2,)),
                                         Tensor("mode", np.int32, (1,))],
                 outputs=[Tensor("y", np.float32, (2,))], max_batch_size=8)
        srv.bind("echo", echo_text, inputs=[Tensor("text", np.bytes_, (1,))],
                 outputs=[Tensor("upper", object, (1,))], max_batch_size=4)
        srv.bind("broken", broken, inputs=[Tensor("x", np.float32, (1,))],
                 outputs=[Tensor("y", np.float32, (1,))], max_batch_size=4)
        srv.run()
        yield srv


def _input(name: str, array: np.ndarray, datatype: str,
           module: object = grpcclient) -> object:
    item = module.InferInput(name, list(array.shape), datatype)  # type: ignore[attr-defined]
    item.set_data_from_numpy(array)
    return item


def test_batched_function_over_tcp_uds_and_http(server: FunctionServer) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for target in (server.addresses.tcp, f"unix:{server.addresses.uds}"):
        client = grpcclient.InferenceServerClient(target)
        assert client.is_server_ready() and client.is_model_ready("double")
        result = client.infer("double", [_input("x", x, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("y"), x * 2)
        meta = client.get_model_metadata("double", as_json=True)
        assert [i["name"] for i in meta["inputs"]] == ["x"]
        assert meta["inputs"][0]["shape"] == ["-1", "4"]
        client.close()
    http = httpclient.InferenceServerClient(server.addresses.http)
    result = http.infer("double", [_input("x", x, "FP32", httpclient)])
    np.testing.assert_array_equal(result.as_numpy("y"), x * 2)
    stats = http.get_inference_statistics("double")["model_stats"][0]
    assert int(stats["inference_count"]) == 9  # three requests of three rows
    page = urllib.request.urlopen(f"http://{server.addresses.http}/metrics").read().decode()
    assert 'model="double"' in page
    http.close()


def test_group_by_values_and_first_value(server: FunctionServer) -> None:
    client = grpcclient.InferenceServerClient(server.addresses.tcp)
    x = np.ones((4, 2), dtype=np.float32)
    mode = np.array([[1], [2], [1], [3]], dtype=np.int32)
    result = client.infer("shift", [_input("x", x, "FP32"), _input("mode", mode, "INT32")])
    np.testing.assert_array_equal(result.as_numpy("y")[:, 0], [101, 201, 101, 301])
    client.close()


def test_bytes_through_sample(server: FunctionServer) -> None:
    client = grpcclient.InferenceServerClient(server.addresses.tcp)
    text = np.array([[b"edge"], [b"agent"]], dtype=object)
    result = client.infer("echo", [_input("text", text, "BYTES")])
    assert result.as_numpy("upper").reshape(-1).tolist() == [b"EDGE", b"AGENT"]
    client.close()


def test_a_raising_function_answers_internal_with_its_message(
        server: FunctionServer, caplog: pytest.LogCaptureFixture) -> None:
    client = grpcclient.InferenceServerClient(server.addresses.tcp)
    with caplog.at_level(logging.ERROR), pytest.raises(InferenceServerException) as err:
        client.infer("broken", [_input("x", np.ones((1, 1), np.float32), "FP32")])
    assert err.value.status() == "StatusCode.INTERNAL"
    assert "ValueError: the weights are not loaded" in err.value.message()
    assert "Traceback" not in err.value.message()
    assert any(r.exc_info and "broken" in r.getMessage() for r in caplog.records)
    http = httpclient.InferenceServerClient(server.addresses.http)
    with pytest.raises(InferenceServerException) as err:
        http.infer("broken", [_input("x", np.ones((1, 1), np.float32), "FP32", httpclient)])
    assert err.value.status() == "500"
    assert "the weights are not loaded" in err.value.message()
    client.close()
    http.close()


def test_fill_optionals_and_sample_on_plain_request_lists() -> None:
    seen: list[list[str]] = []

    @fill_optionals(temperature=np.array([0.5], dtype=np.float32))
    @batch
    def infer(prompt: np.ndarray, temperature: np.ndarray) -> dict[str, np.ndarray]:
        seen.append(sorted(["prompt", "temperature"]))
        return {"out": prompt * temperature}

    requests = [{"prompt": np.ones((2, 1), np.float32)},
                {"prompt": np.ones((1, 1), np.float32),
                 "temperature": np.full((1, 1), 2.0, np.float32)}]
    answers = infer(requests)
    assert [a["out"].reshape(-1).tolist() for a in answers] == [[0.5, 0.5], [2.0]]
    assert _rows({"a": np.zeros((3, 1))}) == 3
    assert seen


def test_bind_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    with FunctionServer(address=None, uds=tmp_path / "s.sock") as srv:
        with pytest.raises(BindError, match="give inputs= and outputs="):
            srv.bind("nothing", batch(lambda x: {"y": x}))
        with pytest.raises(BindError, match="optional inputs"):
            srv.bind("opt", double, inputs=[Tensor("x", np.float32, (4,), optional=True)])
        with pytest.raises(BindError, match="no KServe datatype"):
            srv.bind("cplx", double, inputs=[Tensor("x", np.complex64, (4,))])
        srv.bind("double", double)
        with pytest.raises(BindError, match="bound already"):
            srv.bind("double", double)


def test_decoupled_function_streams_each_yield(tmp_path: Path) -> None:
    import queue

    def count(requests: list[dict[str, np.ndarray]]) -> Iterator[list[dict[str, np.ndarray]]]:
        n = int(requests[0]["n"].reshape(-1)[0])
        for i in range(n):
            yield [{"i": np.array([i], dtype=np.int32)}]

    with FunctionServer(address="127.0.0.1:0") as srv:
        srv.bind("count", count, inputs=[Tensor("n", np.int32, (1,))],
                 outputs=[Tensor("i", np.int32, (1,))], decoupled=True)
        srv.run()
        client = grpcclient.InferenceServerClient(srv.addresses.tcp)
        answers: queue.Queue[object] = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        try:
            client.async_stream_infer("count", [_input("n", np.array([3], np.int32), "INT32")],
                                      request_id="r")
            got = [answers.get(timeout=60) for _ in range(3)]
        finally:
            client.stop_stream()
            client.close()
    assert [int(r.as_numpy("i")[0]) for r in got] == [0, 1, 2]  # type: ignore[attr-defined]


def test_response_cache_answers_a_repeated_request_without_calling_again() -> None:
    calls: list[int] = []

    @batch
    def slow_square(x: np.ndarray) -> dict[str, np.ndarray]:
        calls.append(len(x))
        return {"y": x * x}

    with FunctionServer(address="127.0.0.1:0", response_cache_mib=4) as srv:
        srv.bind("square", slow_square, inputs=[Tensor("x", np.float32, (2,))],
                 outputs=[Tensor("y", np.float32, (2,))], max_batch_size=4,
                 response_cache=True)
        srv.run()
        client = grpcclient.InferenceServerClient(srv.addresses.tcp)
        x = np.array([[3, 4]], dtype=np.float32)
        first = client.infer("square", [_input("x", x, "FP32")]).as_numpy("y")
        second = client.infer("square", [_input("x", x, "FP32")]).as_numpy("y")
        stats = client.get_inference_statistics("square", as_json=True)["model_stats"][0]
        client.close()
    np.testing.assert_array_equal(first, second)
    assert calls == [1]
    assert int(stats["inference_stats"]["cache_hit"]["count"]) == 1


def test_an_undecorated_function_gets_one_request_per_row() -> None:
    seen: list[int] = []

    def per_request(requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        seen.append(len(requests))
        assert all(r["x"].shape == (1, 2) for r in requests)
        return [{"y": r["x"].sum(axis=1, keepdims=True)} for r in requests]

    with FunctionServer(address="127.0.0.1:0") as srv:
        srv.bind("sum", per_request, inputs=[Tensor("x", np.float32, (2,))],
                 outputs=[Tensor("y", np.float32, (1,))], max_batch_size=8)
        srv.run()
        client = grpcclient.InferenceServerClient(srv.addresses.tcp)
        x = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)
        y = client.infer("sum", [_input("x", x, "FP32")]).as_numpy("y")
        client.close()
    assert seen == [3]
    assert y.reshape(-1).tolist() == [3, 7, 11]
