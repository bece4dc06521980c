"""Hostile and malformed input over HTTP: a 4xx with a one-line JSON error naming what is
wrong, never a traceback, and the agent keeps serving."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import zlib

import numpy as np
import pytest

from tests.agent_http.conftest import MAX_BODY, HttpAgent
from tests.support.eventually import eventually

INFER = "/v2/models/mlp/versions/1/infer"


def _conn(agent: HttpAgent) -> http.client.HTTPConnection:
    host, _, port = agent.http.rpartition(":")
    return http.client.HTTPConnection(host, int(port), timeout=60)


def _call(agent: HttpAgent, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, dict]:
    conn = _conn(agent)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    assert b"Traceback" not in data
    return response.status, json.loads(data) if data.startswith(b"{") else {}


def _good(rows: int = 1) -> dict:
    return {"inputs": [{"name": "input", "shape": [rows, 64], "datatype": "FP32",
                        "data": [0.5] * (64 * rows)}]}


def _assert_still_serving(agent: HttpAgent) -> None:
    status, doc = _call(agent, "POST", INFER, json.dumps(_good()).encode())
    assert status == 200 and doc["outputs"][0]["shape"] == [1, 10]


@pytest.mark.parametrize(("body", "needle"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b"{}", "no inputs"),
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 65], "datatype": "FP32",
                             "data": [0.0] * 65}]}).encode(), "'input'"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                             "data": [0.0] * 63}]}).encode(), "needs 64"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                             "data": ["x"] * 64}]}).encode(), "not FP32"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                             "data": [[0.0] * 60, [0.0] * 4]}]}).encode(), "regular array"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, -64], "datatype": "FP32",
                             "data": []}]}).encode(), "negative"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1] * 40, "datatype": "FP32",
                             "data": [0.0]}]}).encode(), "dimensions"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP99",
                             "data": [0.0] * 64}]}).encode(), "FP99"),
    (json.dumps({"inputs": [{"name": "input", "shape": "1x64", "datatype": "FP32",
                             "data": [0.0] * 64}]}).encode(), "list of integers"),
    (json.dumps({**_good(), "id": "x" * 300}).encode(), "request id"),
    (json.dumps({**_good(), "outputs": [{"name": "nope"}]}).encode(), "nope"),
    (json.dumps({**_good(), "parameters": {f"k{i}": i for i in range(40)}}).encode(),
     "parameters"),
])
def test_malformed_json_requests_get_400(http_agent: HttpAgent, body: bytes,
                                         needle: str) -> None:
    status, doc = _call(http_agent, "POST", INFER, body)
    assert status == 400, doc
    assert needle in doc["error"] and "\n" not in doc["error"]


def test_binary_extension_mismatches_get_400(http_agent: HttpAgent) -> None:
    x = np.zeros((1, 64), np.float32).tobytes()
    header = json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(x)}}]}).encode()
    cases = [
        (header + x[:-4], len(header), "goes past the end"),
        (header + x + b"xx", len(header), "belong to no input"),
        (header + x, len(header) + 10_000, "holds only"),
        (header + x, -1, "not a number"),
    ]
    for body, length, needle in cases:
        status, doc = _call(http_agent, "POST", INFER, body,
                            {"Inference-Header-Content-Length": str(length)})
        assert status == 400 and needle in doc["error"], (needle, doc)
    status, doc = _call(http_agent, "POST", INFER, header + x,
                        {"Inference-Header-Content-Length": str(len(header))})
    assert status == 200 and doc["outputs"][0]["data"]


def test_a_body_over_the_limit_is_refused_unread(http_agent: HttpAgent) -> None:
    host, _, port = http_agent.http.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY + 1}"
                     "\r\n\r\n".encode())  # and no body: the answer must not wait for it
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 413")
    assert b"max_body_bytes" in answer
    _assert_still_serving(http_agent)


def test_compressed_bodies(http_agent: HttpAgent) -> None:
    body = json.dumps(_good()).encode()
    for encoding, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        status, doc = _call(http_agent, "POST", INFER, packed, {"Content-Encoding": encoding})
        assert status == 200 and doc["outputs"][0]["shape"] == [1, 10]
    bomb = gzip.compress(b"0" * (MAX_BODY + 1024))  # ~4 KB that would inflate past the limit
    status, doc = _call(http_agent, "POST", INFER, bomb, {"Content-Encoding": "gzip"})
    assert status == 413 and "inflates" in doc["error"]
    status, doc = _call(http_agent, "POST", INFER, b"garbage", {"Content-Encoding": "gzip"})
    assert status == 400 and "decompress" in doc["error"]
    status, doc = _call(http_agent, "POST", INFER, body, {"Content-Encoding": "br"})
    assert status == 415


def test_protocol_abuse(http_agent: HttpAgent) -> None:
    status, doc = _call(http_agent, "POST", INFER, b"5\r\nhello\r\n0\r\n\r\n",
                        {"Transfer-Encoding": "chunked"})
    assert status == 411 and "Content-Length" in doc["error"]
    status, doc = _call(http_agent, "GET", "/v2/no/such/thing")
    assert status == 404 and "not a KServe v2 endpoint" in doc["error"]
    status, doc = _call(http_agent, "DELETE", "/v2/health/live")
    assert status == 405
    status, doc = _call(http_agent, "POST", "/v2/repository/index", b"[")
    assert status == 400 and "JSON" in doc["error"]
    status, doc = _call(http_agent, "POST", "/v2/systemsharedmemory/region/r/register",
                        json.dumps({"key": "/../etc/passwd", "byte_size": 8}).encode())
    assert status == 400 and "'r'" in doc["error"]
    status, doc = _call(http_agent, "GET", "/v2/models/mlp/versions/zero")
    assert status == 400 and "version" in doc["error"]
    host, _, port = http_agent.http.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 400") and b"Traceback" not in answer
    _assert_still_serving(http_agent)


def test_connections_beyond_the_cap_get_503(http_agent: HttpAgent) -> None:
    host, _, port = http_agent.http.rpartition(":")
    held = []
    try:
        for _ in range(8):  # the fixture's max_connections; each one holds a thread
            conn = _conn(http_agent)
            conn.request("GET", "/v2/health/live")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            held.append(conn)  # kept open (keep-alive): its thread stays taken
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(b"GET /v2/models/mlp HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = sock.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 503") and b"max_connections" in answer
        # health is still answered, from the reserve (one request, then closed)
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = sock.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" in answer
    finally:
        for conn in held:
            conn.close()
    # the slots come back once those connections close
    eventually(lambda: _call(http_agent, "GET", "/v2/health/live")[0] == 200, timeout=60,
               message="the connection slots never came back")


def test_repository_control_off_is_refused_naming_the_setting(tmp_path) -> None:
    from edge_agent.core.dataplane import DataPlane
    from edge_agent.frontends.common.context import FrontendContext
    from edge_agent.frontends.http.routes import HttpRequest, KServeRoutes

    plane = DataPlane(tmp_path)
    try:
        routes = KServeRoutes(FrontendContext(plane, control=None))
        answer = routes.handle(HttpRequest("POST", "/v2/repository/models/mlp/unload", b"",
                                           None, "test"))
        assert answer.status == 503
        assert b"repository_control" in answer.body
        meta = json.loads(routes.handle(HttpRequest("GET", "/v2", b"", None, "t")).body)
        assert "model_repository" not in meta["extensions"]
    finally:
        plane.close()


def test_expect_continue_over_the_limit_gets_413_without_a_body(http_agent: HttpAgent) -> None:
    host, _, port = http_agent.http.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     f"Content-Length: {MAX_BODY * 2}\r\n\r\n".encode())
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 413") and b"100 Continue" not in answer


def test_a_client_that_sends_an_oversized_body_still_reads_the_413(
        http_agent: HttpAgent) -> None:
    status, doc = _call(http_agent, "POST", INFER, b"0" * (MAX_BODY + 1))
    assert status == 413 and "max_body_bytes" in doc["error"]
