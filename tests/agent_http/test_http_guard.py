"""Hostile HTTP callers (issue 27) against a real agent with small limits: JSON amplification,
many output names, slowloris, a non-ASCII Content-Length and a /metrics flood. Each test failed
on the agent before these limits (docs/security.md, the abuse table)."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks.attacks.http_hostile import (
    Slowloris,
    amplification_body,
    duplicate_outputs_body,
    raw_exchange,
)
from edge_agent.cli import main as agent_cli
from edge_agent.config import load_config
from tests.agent_grpc.conftest import Sources, sources  # noqa: F401  (the session fixture)
from tests.support.eventually import eventually
from tests.support.harness import running

MAX_BODY = 4 * 1024 * 1024
MAX_CONNECTIONS = 8
PER_PEER = 6
HEADER_TIMEOUT_S = 2
AGENT_TOML = f"""
[http]
max_body_bytes = {MAX_BODY}
max_connections = {MAX_CONNECTIONS}
max_connections_per_peer = {PER_PEER}
header_timeout_s = {HEADER_TIMEOUT_S}
body_timeout_s = 3
idle_timeout_s = 60
metrics_cache_s = 600
"""
INFER = "/v2/models/mlp/versions/1/infer"
GOOD = json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                               "data": [0.5] * 64}]}).encode()


@pytest.fixture(scope="module")
def http_address(sources: Sources,  # noqa: F811  (the imported fixture)
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real agent (mlp v1) with the small limits above; its HTTP address."""
    root = tmp_path_factory.mktemp("http-guard")
    state = root / "state"
    bundle = next(b for key, b in sources.bundles.items() if key.split("-")[0] == "mlp")
    assert agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned",
                      str(bundle)]) == 0
    toml = root / "agent.toml"
    toml.write_text(AGENT_TOML)
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0", no_uds=True,
                         http_address="127.0.0.1:0")
    with running(config, timeout_s=180, name="http-guard-agent") as served:
        assert served.addresses is not None and served.addresses.http
        yield served.addresses.http


def _call(address: str, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _error(data: bytes) -> str:
    message: str = json.loads(data)["error"]
    return message


def test_amplified_json_is_refused_before_it_is_parsed(http_address: str) -> None:
    # a 4 KiB gzip body inflating to 4 MiB of empty arrays: refused by the ratio cap while
    # inflating (before: inflated whole and parsed into ~90 MiB of lists)
    bomb = amplification_body(MAX_BODY)
    status, data = _call(http_address, "POST", INFER, bomb, {"Content-Encoding": "gzip"})
    assert status == 413 and "max_inflate_ratio" in _error(data), data[:200]
    # the same JSON within the ratio (sent plain, under max_body_bytes): refused by the count
    plain = gzip.decompress(bomb)
    status, data = _call(http_address, "POST", INFER, plain)
    assert status == 413 and "max_json_elements" in _error(data), data[:200]
    # dense numbers past the count: the same
    dense = json.dumps({"inputs": [{"name": "input", "shape": [4500, 64], "datatype": "FP32",
                                    "data": [0.5] * (4500 * 64)}]}).encode()
    status, data = _call(http_address, "POST", INFER, dense)
    assert status == 413 and "binary data" in _error(data)
    # a compressed request inside the ratio is served
    status, data = _call(http_address, "POST", INFER, gzip.compress(GOOD),
                         {"Content-Encoding": "gzip"})
    assert status == 200 and json.loads(data)["outputs"][0]["shape"] == [1, 10]


def test_many_output_names_are_refused_at_the_models_output_count(http_address: str) -> None:
    status, data = _call(http_address, "POST", INFER, duplicate_outputs_body(20_000))
    assert status == 400 and "asks for 20000 outputs; the model has 1" in _error(data)
    doc = json.loads(GOOD)
    doc["outputs"] = [{"name": "probs"}, {"name": "probs"}]
    status, data = _call(http_address, "POST", INFER, json.dumps(doc).encode())
    assert status == 400 and "name each output once" in _error(data)
    doc["outputs"] = [{"name": "probs"}]
    status, data = _call(http_address, "POST", INFER, json.dumps(doc).encode())
    assert status == 200


def test_content_length_in_non_ascii_digits_gets_400(http_address: str) -> None:
    answer = raw_exchange(http_address, f"POST {INFER} HTTP/1.1\r\nHost: x\r\n"
                          "Content-Length: \u00b2\r\n\r\n".encode("latin-1"))
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"is not a number" in answer


def test_slowloris_is_cut_by_the_header_deadline_and_health_is_answered(
        http_address: str) -> None:
    # more slow connections than the per-peer cap lets in; each sends a byte every 0.5 s, so
    # the idle timeout (60 s) never fires: only the total header deadline (2 s) ends them
    slow = Slowloris(http_address, count=MAX_CONNECTIONS, every_s=0.5)
    health: list[int] = []
    try:
        def all_closed() -> bool:
            slow.tick()
            health.append(_call(http_address, "GET", "/v2/health/live")[0])
            return slow.closed >= MAX_CONNECTIONS

        eventually(all_closed, timeout=60, interval=slow.every_s,
                   message=lambda: f"{slow.closed} of {MAX_CONNECTIONS} slow connections "
                                   "were closed by the agent")
    finally:
        slow.close()
    assert health and set(health) == {200}, health


def test_connections_beyond_the_per_peer_cap_get_503_but_health_is_answered(
        http_address: str) -> None:
    host, _, port = http_address.rpartition(":")
    held: list[http.client.HTTPConnection] = []

    def hold_every_slot() -> bool:
        # keep-alive connections, each holding a slot; connections of earlier tests may still
        # be ending, then some of these are reserve ones (answered with Connection: close)
        for conn in held:
            conn.close()
        held.clear()
        for _ in range(PER_PEER):
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            conn.request("GET", "/v2/health/live")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            held.append(conn)
            if response.getheader("Connection", "").lower() == "close":
                return False
        return True

    try:
        eventually(hold_every_slot, timeout=60, interval=0.5,
                   message="the slots of earlier connections never came back")
        answer = raw_exchange(http_address, b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503") and b"max_connections_per_peer" in answer
        for path in ("/v2/health/live", "/v2/health/ready"):
            answer = raw_exchange(http_address, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"
                                  .encode())
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    finally:
        for conn in held:
            conn.close()
    eventually(lambda: _call(http_address, "GET", "/v2")[0] == 200, timeout=60,
               message="the per-peer slots never came back")


def test_a_body_that_trickles_gets_408_at_the_body_deadline(http_address: str) -> None:
    host, _, port = http_address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(GOOD)}\r\n"
                     "\r\n".encode())
        sock.setblocking(False)
        answer = b""
        sent = 0

        def answered() -> bool:
            nonlocal answer, sent
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(65536)
            if answer:
                return True
            if sent < len(GOOD) - 1:  # never the last byte
                sock.send(GOOD[sent:sent + 1])
                sent += 1
            return False

        eventually(answered, timeout=60, interval=0.5, message="no answer to a slow body")
    assert answer.startswith(b"HTTP/1.1 408") and b"body_timeout_s" in answer, answer[:300]


def test_metrics_are_rendered_once_per_cache_period(http_address: str) -> None:
    status, first = _call(http_address, "GET", "/metrics")
    assert status == 200 and b"nv_inference_request_success" in first
    for _ in range(3):
        assert _call(http_address, "POST", INFER, GOOD)[0] == 200
    # a flood of scrapes (16 at once) within metrics_cache_s: every one gets the same page,
    # rendered once, although the counters moved
    barrier = threading.Barrier(16)

    def scrape(_: int) -> tuple[int, bytes]:
        barrier.wait(60)
        return _call(http_address, "GET", "/metrics")

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(scrape, range(16)))
    assert [status for status, _ in answers] == [200] * 16
    assert {page for _, page in answers} == {first}
