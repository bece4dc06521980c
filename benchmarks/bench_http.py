"""HTTP/REST vs gRPC, and what a Prometheus scrape costs, as ratios measured in one run.

    python -m benchmarks.bench_http                    # ~1-2 minutes
    python -m benchmarks.bench_http --rounds 5 --seconds 3
    python -m benchmarks.bench_http --servers          # the HTTP server library choice

Starts the agent as a subprocess (``edge-agent serve --http 127.0.0.1:0``) with the MLP (ONNX
Runtime) and measures, interleaved over ``--rounds`` rounds (medians reported):
  * MLP at one request in flight over TCP: p50 latency of KServe v2 gRPC (a sync channel,
    request serialized once) vs KServe v2 HTTP/REST with Triton's binary tensor extension
    (``http.client`` keep-alive, body built once) vs HTTP/REST with JSON tensors;
  * MLP over gRPC at 8 in flight: throughput and the server's CPU per request without and
    with a Prometheus-style scrape of ``/metrics`` every second (a scraper thread here; the
    order alternates between rounds), and the agent's CPU time per scrape.

``--servers`` compares, on a bare echo endpoint, the candidate HTTP servers for the front end:
the standard library (the agent's own ``edge_agent.frontends.http.server``), uvicorn + starlette and
aiohttp (each where installed): p50 at one in flight, throughput at 4 in flight, the server's
RSS and the bytes its packages install.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.metadata
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_serve import ENV, ORT, Proc, _cpu_s, load, median_result, stop_process
from benchmarks.loadgen import INFER_METHOD, LoadResult, infer_request_bytes

READY = re.compile(r"listening on (?P<grpc>\S+?); .*HTTP on (?P<http>\S+?);")


def build_state(work: Path) -> Path:
    """The MLP (ORT) installed in a state dir."""
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles
    from tests.support.model_factory import make_mlp

    mlp = make_mlp(work / "mlp.onnx", seed=1)
    state = work / "state"
    for b in build_bundles(mlp, name="mlp", version=1, profiles=[ORT], out_dir=work / "out"):
        if agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned", str(b)]):
            raise SystemExit(f"add-bundle {b} failed")
    return state


def _binary_body(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape),
                                     "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "probs", "parameters": {"binary_data": True}}]})
    raw = header.encode()
    return raw + x.tobytes(), {"Inference-Header-Content-Length": str(len(raw)),
                               "Content-Type": "application/octet-stream"}


def _json_body(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
    return json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode(), \
        {"Content-Type": "application/json"}


def _timed(call: Callable[[], object], seconds: float) -> list[float]:
    for _ in range(50):  # warm up
        call()
    out: list[float] = []
    stop = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        if t0 >= stop:
            return out
        call()
        out.append(time.perf_counter() - t0)


def http_p50(address: str, path: str, body: bytes, headers: dict[str, str],
             seconds: float) -> float:
    """p50 (ms) of POSTs of ``body`` at one in flight on one keep-alive connection."""
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def call() -> None:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise SystemExit(f"HTTP {response.status}: {data[:200]!r}")

    try:
        return statistics.median(_timed(call, seconds)) * 1e3
    finally:
        conn.close()


def grpc_p50(target: str, payload: bytes, seconds: float) -> float:
    """p50 (ms) of ModelInfer calls at one in flight on a sync channel."""
    import grpc

    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(INFER_METHOD, request_serializer=None,
                                   response_deserializer=None)
        return statistics.median(_timed(lambda: call(payload), seconds)) * 1e3


class Scraper:
    """GET /metrics every second on a thread (what a Prometheus server does)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.times: list[float] = []
        self.size = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        host, _, port = self.address.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        while not self._stop.is_set():
            t0 = time.perf_counter()
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            self.size = len(response.read())
            self.times.append(time.perf_counter() - t0)
            self._stop.wait(max(0.0, 1.0 - (time.perf_counter() - t0)))
        conn.close()

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _scrape_cpu_ms(address: str, pid: int, n: int = 200) -> float:
    """The agent's CPU time per /metrics scrape (ms), from ``n`` scrapes in a row."""
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        cpu0 = _cpu_s(pid)
        for _ in range(n):
            conn.request("GET", "/metrics")
            conn.getresponse().read()
        return (_cpu_s(pid) - cpu0) * 1e3 / n
    finally:
        conn.close()


def agent_part(rounds: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = build_state(Path(tmp))
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state), "--grpc",
                      "127.0.0.1:0", "--no-uds", "--management", "none", "--http",
                      "127.0.0.1:0"], "edge-agent ready")
        try:
            match = READY.search(agent.line)
            assert match, agent.line
            grpc_target, http_address = match["grpc"], match["http"]
            x = np.random.default_rng(0).random((1, 64), dtype=np.float32)
            payload = infer_request_bytes("mlp", {"input": x}, "1")
            binary, binary_headers = _binary_body(x)
            js, js_headers = _json_body(x)
            path = "/v2/models/mlp/versions/1/infer"
            p50: dict[str, list[float]] = {"grpc": [], "http-binary": [], "http-json": []}
            plain: list[LoadResult] = []
            scraped: list[LoadResult] = []
            scrapes: list[float] = []
            size = 0
            for r in range(rounds):
                p50["grpc"].append(grpc_p50(grpc_target, payload, seconds))
                p50["http-binary"].append(http_p50(http_address, path, binary, binary_headers,
                                                   seconds))
                p50["http-json"].append(http_p50(http_address, path, js, js_headers, seconds))
                for with_scrape in ((False, True) if r % 2 == 0 else (True, False)):
                    if not with_scrape:
                        plain.append(load(grpc_target, payload, 8, seconds, agent.pid))
                        continue
                    with Scraper(http_address) as scraper:
                        scraped.append(load(grpc_target, payload, 8, seconds, agent.pid))
                    scrapes += scraper.times
                    size = scraper.size
                print(f"  round {r + 1}/{rounds}: " + ", ".join(
                    f"{k} {v[-1]:.3f} ms" for k, v in p50.items())
                    + f"; c=8 {plain[-1].throughput:.0f} vs {scraped[-1].throughput:.0f} "
                    "infer/s with scrape", flush=True)
            scrape_cpu_ms = _scrape_cpu_ms(http_address, agent.pid)
        finally:
            agent.stop()
    med = {k: statistics.median(v) for k, v in p50.items()}
    print("\nMLP, one request in flight, p50 (median of rounds):")
    for k, v in med.items():
        print(f"  {k:12s} {v:7.3f} ms  ({v / med['grpc']:.2f}x gRPC)")
    a, b = median_result(plain), median_result(scraped)
    print("\nMLP over gRPC at 8 in flight (median round):")
    print(f"  no scrape        {a.line()}")
    print(f"  scrape every 1 s {b.line()}")
    print(f"  throughput ratio with/without scrape: {b.throughput / a.throughput:.3f}")
    if scrapes:
        print(f"  one scrape of /metrics: p50 {statistics.median(scrapes) * 1e3:.2f} ms, "
              f"{size} bytes")
    print(f"  agent CPU per scrape (200 back to back, idle): {scrape_cpu_ms:.2f} ms = "
          f"{scrape_cpu_ms / 10:.2f} % of one core at one scrape a second")


# -- the server library comparison ------------------------------------------------------------

def _serve_echo(kind: str) -> None:
    """Run an echo server of ``kind`` on 127.0.0.1:0; print 'ready PORT' (a subprocess)."""
    if kind == "stdlib":
        from edge_agent.config.http import HttpConfig
        from edge_agent.frontends.http.routes import HttpAnswer, HttpRequest
        from edge_agent.frontends.http.server import HttpFrontEnd

        class Echo:
            def handle(self, request: HttpRequest) -> HttpAnswer:
                return HttpAnswer(200, request.body)

        front = HttpFrontEnd(HttpConfig(listen="127.0.0.1:0"), Echo())  # type: ignore[arg-type]
        print("ready", front.start().rpartition(":")[2], flush=True)
        threading.Event().wait()
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if kind == "uvicorn+starlette":
        import uvicorn
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def echo(request: Request) -> Response:
            return Response(await request.body())

        app = Starlette(routes=[Route("/echo", echo, methods=["POST"])])
        print("ready", port, flush=True)
        uvicorn.Server(uvicorn.Config(app, log_level="error")).run(sockets=[sock])
    elif kind == "aiohttp":
        from aiohttp import web

        async def echo_aio(request: web.Request) -> web.Response:
            return web.Response(body=await request.read())

        app_aio = web.Application()
        app_aio.router.add_post("/echo", echo_aio)
        print("ready", port, flush=True)
        web.run_app(app_aio, sock=sock, print=None, handle_signals=True)


SERVERS: dict[str, tuple[str, ...]] = {
    "stdlib": (),
    "uvicorn+starlette": ("uvicorn", "starlette", "anyio", "h11", "click", "sniffio", "idna"),
    "aiohttp": ("aiohttp", "multidict", "yarl", "frozenlist", "aiosignal", "propcache",
                "aiohappyeyeballs", "attrs", "idna"),
}


def _installed_bytes(dists: tuple[str, ...]) -> int | None:
    total = 0
    for name in dists:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            if name in ("sniffio", "idna", "attrs"):
                continue  # not every version needs it
            return None
        for f in files:
            with contextlib.suppress(OSError):
                total += Path(str(f.locate())).stat().st_size
    return total


@contextlib.contextmanager
def _echo_server(kind: str) -> Iterator[tuple[int, int]]:
    popen = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_http", "--serve-echo",
                              kind], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert popen.stdout is not None
        line = popen.stdout.readline()
        if not line.startswith("ready"):
            raise SystemExit(f"{kind} echo server did not start: {line!r}")
        port = int(line.split()[1])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # uvicorn/aiohttp print before they accept
            with contextlib.suppress(OSError):
                http.client.HTTPConnection("127.0.0.1", port, timeout=5).connect()
                break
            time.sleep(0.05)
        yield port, popen.pid
    finally:
        stop_process(popen)


def _throughput(port: int, body: bytes, threads: int, seconds: float) -> float:
    counts = [0] * threads
    stop = time.perf_counter() + seconds

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.perf_counter() < stop:
            conn.request("POST", "/echo", body=body)
            conn.getresponse().read()
            counts[i] += 1
        conn.close()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(counts) / seconds


def servers_part(rounds: int, seconds: float) -> None:
    import psutil

    body = np.zeros(64, np.float32).tobytes() + b"x" * 200
    available = [k for k in SERVERS if _installed_bytes(SERVERS[k]) is not None]
    results: dict[str, dict[str, list[float]]] = {k: {"p50": [], "rps": [], "cpu": [],
                                                      "rss": []} for k in available}
    for r in range(rounds):
        for kind in available:
            with _echo_server(kind) as (port, pid):
                results[kind]["p50"].append(http_p50(f"127.0.0.1:{port}", "/echo", body, {},
                                                     seconds))
                cpu0 = _cpu_s(pid)
                rps = _throughput(port, body, 4, seconds)
                results[kind]["rps"].append(rps)
                results[kind]["cpu"].append((_cpu_s(pid) - cpu0) * 1e6 / (rps * seconds))
                results[kind]["rss"].append(psutil.Process(pid).memory_info().rss / 2**20)
        print(f"  round {r + 1}/{rounds} done", flush=True)
    base = statistics.median(results["stdlib"]["p50"])
    print("\nEcho endpoint (POST 456 bytes), medians of rounds:")
    for kind, res in results.items():
        size = _installed_bytes(SERVERS[kind]) or 0
        med = {k: statistics.median(v) for k, v in res.items()}
        print(f"  {kind:18s} p50 {med['p50']:6.3f} ms ({med['p50'] / base:.2f}x stdlib)  "
              f"c=4 {med['rps']:7.0f} req/s  server CPU {med['cpu']:4.0f} us/req  "
              f"RSS {med['rss']:5.1f} MiB  installs {size / 2**20:5.1f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_http",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="seconds per measurement (default 2)")
    parser.add_argument("--servers", action="store_true",
                        help="compare the candidate HTTP server libraries instead")
    parser.add_argument("--serve-echo", metavar="KIND", help=argparse.SUPPRESS)
    args: Any = parser.parse_args(argv)
    if args.serve_echo:
        _serve_echo(args.serve_echo)
        return 0
    if args.servers:
        servers_part(args.rounds, args.seconds)
    else:
        agent_part(args.rounds, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
