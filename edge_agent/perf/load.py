"""The closed loop: N calls in flight, each answered call followed at once by the next.

Requests are serialized once and sent as bytes: over gRPC by worker processes making grpcio's
synchronous calls (:mod:`edge_agent.perf.workers`), over KServe v2 REST as whole HTTP/1.1
messages on keep-alive connections (:mod:`edge_agent.perf.rest`); responses stay undecoded
(only their status is checked), so the generator spends little CPU per call on a machine
whose cores it shares with the server it measures. The server's statistics are read before
and after the measured window, with nothing in flight, so the window's server-side breakdown
counts the same requests the client does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc

from edge_agent.perf.rest import CallFailed, HttpConnection, http_target
from edge_agent.perf.server_stats import ServerStats
from edge_agent.perf.workers import CHANNEL_OPTIONS, INFER_METHOD, WorkerPool


@dataclass(frozen=True)
class Measurement:
    """One concurrency level: calls answered in the window, their latencies, the errors."""

    concurrency: int
    batch: int  # inferences per request
    seconds: float
    latencies_us: tuple[float, ...] = field(repr=False)  # sorted
    errors: int = 0
    first_error: str = ""
    server: ServerStats | None = None  # the window's difference of the model's statistics

    @property
    def requests(self) -> int:
        return len(self.latencies_us)

    @property
    def throughput(self) -> float:
        """Inferences per second (requests x batch size)."""
        return self.requests * self.batch / self.seconds if self.seconds > 0 else 0.0

    @property
    def avg_us(self) -> float:
        return statistics.fmean(self.latencies_us) if self.latencies_us else 0.0

    @property
    def std_us(self) -> float:
        return statistics.pstdev(self.latencies_us) if len(self.latencies_us) > 1 else 0.0

    def percentile_us(self, p: float) -> float:
        """The ``p``-th percentile latency (nearest rank), 0 with no answered call."""
        lat = self.latencies_us
        if not lat:
            return 0.0
        return lat[min(len(lat) - 1, max(0, math.ceil(p / 100 * len(lat)) - 1))]


Call = Callable[[bytes], Awaitable[None]]
"""Sends one prepared request and waits for its answer; CallFailed when it failed."""


def measure(target: str, payloads: Sequence[bytes], *, concurrency: int, seconds: float,
            warmup_s: float = 0.5, batch: int = 1, protocol: str = "grpc",
            pool: WorkerPool | None = None,
            stats: Callable[[], ServerStats] | None = None) -> Measurement:
    """Keep ``concurrency`` calls in flight for ``warmup_s``, then (nothing in flight) read
    the server's statistics with ``stats``, then for ``seconds`` measuring every call, then
    read them again. Worker ``i`` sends ``payloads[i % len(payloads)]``: serialized
    ModelInferRequests over gRPC from worker processes (``pool``, or a pool for this call,
    :mod:`edge_agent.perf.workers`), or whole HTTP/1.1 messages with ``protocol`` "http" (one
    keep-alive connection per worker, :mod:`edge_agent.perf.rest`)."""
    before: list[ServerStats] = []

    def snapshot() -> None:
        if stats is not None:
            before.append(stats())

    if protocol == "http":
        m = asyncio.run(_http_loop(target, payloads, concurrency=concurrency, seconds=seconds,
                                   warmup_s=warmup_s, batch=batch, between=snapshot))
    else:
        with contextlib.ExitStack() as own:
            workers = pool or own.enter_context(WorkerPool(target))
            results, start = workers.run(payloads, concurrency=concurrency, seconds=seconds,
                                         warmup_s=warmup_s, between=snapshot)
        errors = [r for r in results if r.errors]
        m = Measurement(concurrency, batch, max(r.ended for r in results) - start,
                        tuple(sorted(x for r in results for x in r.latencies_us)),
                        sum(r.errors for r in results),
                        errors[0].first_error if errors else "")
    if stats is None:
        return m
    return dataclasses.replace(m, server=stats() - before[0])


async def _http_loop(target: str, payloads: Sequence[bytes], *, concurrency: int,
                     seconds: float, warmup_s: float, batch: int,
                     between: Callable[[], None]) -> Measurement:
    connections = [HttpConnection(http_target(target)) for _ in range(concurrency)]
    try:
        return await _drive([c.send for c in connections], payloads, seconds=seconds,
                            warmup_s=warmup_s, batch=batch, between=between)
    finally:
        for c in connections:
            c.close()


async def closed_loop(target: str, payloads: Sequence[bytes], *, concurrency: int,
                      seconds: float, warmup_s: float = 0.5, batch: int = 1,
                      method: str = INFER_METHOD, protocol: str = "grpc") -> Measurement:
    """The closed loop in this process's event loop: over gRPC one ``grpc.aio`` channel
    (``method`` called with bytes), over REST as :func:`measure`. The benchmarks' load
    generator (benchmarks/loadgen.py); ``edge-agent perf`` measures gRPC with worker
    processes instead, as this loop's own CPU and latency show in what it measures
    (benchmarks/bench_perf_agreement.py compares both with perf_analyzer)."""
    if protocol == "http":
        return await _http_loop(target, payloads, concurrency=concurrency, seconds=seconds,
                                warmup_s=warmup_s, batch=batch, between=lambda: None)
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        await asyncio.wait_for(channel.channel_ready(), 30)
        stub = channel.unary_unary(method, request_serializer=None, response_deserializer=None)

        async def call(payload: bytes) -> None:
            try:
                await stub(payload)
            except grpc.aio.AioRpcError as exc:
                raise CallFailed(f"{exc.code().name}: {exc.details()}") from None

        return await _drive([call] * concurrency, payloads, seconds=seconds,
                            warmup_s=warmup_s, batch=batch, between=lambda: None)


async def _drive(calls: Sequence[Call], payloads: Sequence[bytes], *, seconds: float,
                 warmup_s: float, batch: int, between: Callable[[], None]) -> Measurement:
    """Worker ``i`` makes ``calls[i]`` with ``payloads[i % len(payloads)]`` again and again:
    a warm-up, ``between()`` with nothing in flight, then the measured window."""
    latencies: list[float] = []
    errors = 0
    first_error = ""

    async def worker(call: Call, payload: bytes, until: float, measured: bool) -> None:
        nonlocal errors, first_error
        while True:
            t0 = time.perf_counter()
            if t0 >= until:
                return
            try:
                await call(payload)
            except CallFailed as exc:
                if measured:
                    errors += 1
                    first_error = first_error or str(exc)
                continue
            if measured:
                latencies.append((time.perf_counter() - t0) * 1e6)

    for measured, length in ((False, warmup_s), (True, seconds)):
        if measured:
            between()
        start = time.perf_counter()
        await asyncio.gather(*(worker(call, payloads[i % len(payloads)], start + length,
                                      measured) for i, call in enumerate(calls)))
    elapsed = time.perf_counter() - start
    return Measurement(len(calls), batch, elapsed, tuple(sorted(latencies)), errors,
                       first_error)
