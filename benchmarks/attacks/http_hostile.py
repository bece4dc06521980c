"""Hostile HTTP callers (issue 27): JSON amplification, duplicate outputs, slowloris, a
non-ASCII Content-Length and a /metrics scrape flood, in turns, against ``target.http``.

Each turn sends a bounded number of requests on loopback; a pool of slow connections trickles a
byte every 2 s throughout (reopened when the agent closes them). The bodies are built here once
(``amplification_body`` and the others are used by ``benchmarks/bench_http_hostile.py`` too).
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import socket
import threading
import time

from benchmarks.attacks import Tally, Target

SLOW_CONNECTIONS = 64
"""The issue's slowloris; the soak's pool is smaller (ATTACK_SLOW_CONNECTIONS)."""
ATTACK_SLOW_CONNECTIONS = 24
"""Under the default per-peer cap (32), so that the other attacks, from the same address,
still reach the request handling they aim at."""
TRICKLE_S = 2.0
DEFAULT_MAX_BODY = 64 * 1024 * 1024


def amplification_body(inflated: int = DEFAULT_MAX_BODY) -> bytes:
    """A gzip body that inflates to ~``inflated`` bytes of JSON padded with empty arrays."""
    head = b'{"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":['
    tail = b'[]]}]}'
    count = max(1, (inflated - len(head) - len(tail)) // 3)
    return gzip.compress(head + b"[]," * count + tail, compresslevel=9)


def duplicate_outputs_body(names: int = 40_000) -> bytes:
    """A request naming ``names`` outputs (all but the first distinct names the model lacks)."""
    doc = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                       "data": [0.5] * 64}],
           "outputs": [{"name": f"o{i}"} for i in range(names)]}
    return json.dumps(doc, separators=(",", ":")).encode()


def split(address: str) -> tuple[str, int]:
    """HOST:PORT as (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def request(address: str, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 30.0) -> int:
    """One request on a new connection; the status (0 when the connection failed)."""
    host, port = split(address)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0
    finally:
        conn.close()


def post(address: str, path: str, body: bytes, headers: dict[str, str],
         timeout: float = 120.0) -> int:
    """POST ``body``; the status (0 when the connection failed)."""
    return request(address, "POST", path, body, headers, timeout)


def get(address: str, path: str, timeout: float = 30.0) -> int:
    """GET ``path``; the status (0 when the connection failed)."""
    return request(address, "GET", path, timeout=timeout)


def raw_exchange(address: str, data: bytes, timeout: float = 30.0) -> bytes:
    """Send ``data`` on a new connection; what the agent answers before closing (b"" on
    error)."""
    try:
        with socket.create_connection(split(address), timeout=timeout) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return b""


class Slowloris:
    """``count`` connections each sending one byte of a request every ``every_s`` seconds."""

    REQUEST = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 4096

    def __init__(self, address: str, count: int = SLOW_CONNECTIONS,
                 every_s: float = TRICKLE_S) -> None:
        self.address = address
        self.count = count
        self.every_s = every_s
        self.closed = 0
        self._socks: list[tuple[socket.socket, int]] = []

    def tick(self) -> None:
        """Top the pool up to ``count`` and send each connection its next byte."""
        while len(self._socks) < self.count:
            try:
                self._socks.append((socket.create_connection(split(self.address), timeout=5),
                                    0))
            except OSError:
                break
        kept = []
        for sock, sent in self._socks:
            try:
                sock.sendall(self.REQUEST[sent:sent + 1])
                kept.append((sock, (sent + 1) % len(self.REQUEST)))
            except OSError:
                self.closed += 1
                sock.close()
        self._socks = kept

    def close(self) -> None:
        """Close every connection."""
        for sock, _ in self._socks:
            with contextlib.suppress(OSError):
                sock.close()
        self._socks = []


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Every hostile HTTP request kind in turns, and a slowloris pool throughout."""
    if target.http is None:
        tally.add("skipped: no HTTP listener")
        return
    address = target.http
    infer = f"/v2/models/{target.model}/infer"
    bomb = amplification_body()
    outputs = duplicate_outputs_body()
    slow = Slowloris(address, count=ATTACK_SLOW_CONNECTIONS)
    next_tick = 0.0
    turn = 0
    try:
        while not stop.is_set():
            if time.monotonic() >= next_tick:
                slow.tick()
                next_tick = time.monotonic() + slow.every_s
            kind = turn % 4
            turn += 1
            if kind == 0:
                status = post(address, infer, bomb, {"Content-Encoding": "gzip"})
                tally.add(f"amplification {status}")
            elif kind == 1:
                status = post(address, infer, outputs, {})
                tally.add(f"duplicate outputs {status}")
            elif kind == 2:
                answer = raw_exchange(address, f"POST {infer} HTTP/1.1\r\nHost: x\r\n"
                                      "Content-Length: \u00b2\r\n\r\n".encode("latin-1"))
                tally.add(f"content-length \u00b2 {answer[9:12].decode() or 'dropped'}")
            else:
                for _ in range(20):
                    tally.add(f"metrics {get(address, '/metrics')}")
            stop.wait(0.05)
    finally:
        tally.add("slowloris closed by the agent", slow.closed)
        slow.close()
