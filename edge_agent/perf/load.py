"""The closed loop: N calls in flight, each answered call followed at once by the next.

Requests are serialized once and sent as bytes through ``grpc.aio`` with identity serializers
(or, over KServe v2 REST, as whole HTTP/1.1 messages on keep-alive connections); responses stay
undecoded (only their status is checked), so the generator spends little CPU per call on a
machine whose cores it shares with the server it measures.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc

from edge_agent.perf.rest import CallFailed, HttpConnection, http_target

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 256 << 20),
                   ("grpc.max_send_message_length", 256 << 20)]


@dataclass(frozen=True)
class Measurement:
    """One concurrency level: calls answered in the window, their latencies, the errors."""

    concurrency: int
    batch: int  # inferences per request
    seconds: float
    latencies_us: tuple[float, ...] = field(repr=False)  # sorted
    errors: int = 0
    first_error: str = ""

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


async def closed_loop(target: str, payloads: Sequence[bytes], *, concurrency: int,
                      seconds: float, warmup_s: float = 0.5, batch: int = 1,
                      method: str = INFER_METHOD, protocol: str = "grpc") -> Measurement:
    """Keep ``concurrency`` calls in flight for ``warmup_s + seconds``; measure the calls that
    start after the warm-up. Worker ``i`` sends ``payloads[i % len(payloads)]``: serialized
    ModelInferRequests over gRPC (one channel), or whole HTTP/1.1 messages with ``protocol``
    "http" (one keep-alive connection per worker, :mod:`edge_agent.perf.rest`)."""
    if protocol == "http":
        connections = [HttpConnection(http_target(target)) for _ in range(concurrency)]
        try:
            return await _drive([c.send for c in connections], payloads, seconds=seconds,
                                warmup_s=warmup_s, batch=batch)
        finally:
            for c in connections:
                c.close()
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        await asyncio.wait_for(channel.channel_ready(), 30)
        stub = channel.unary_unary(method, request_serializer=None, response_deserializer=None)

        async def call(payload: bytes) -> None:
            try:
                await stub(payload)
            except grpc.aio.AioRpcError as exc:
                raise CallFailed(f"{exc.code().name}: {exc.details()}") from None

        return await _drive([call] * concurrency, payloads, seconds=seconds,
                            warmup_s=warmup_s, batch=batch)


async def _drive(calls: Sequence[Call], payloads: Sequence[bytes], *, seconds: float,
                 warmup_s: float, batch: int) -> Measurement:
    """Worker ``i`` makes ``calls[i]`` with ``payloads[i % len(payloads)]`` again and again."""
    latencies: list[float] = []
    errors = 0
    first_error = ""
    start = time.perf_counter()
    measure_from = start + warmup_s
    stop_at = measure_from + seconds

    async def worker(call: Call, payload: bytes) -> None:
        nonlocal errors, first_error
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            try:
                await call(payload)
            except CallFailed as exc:
                if t0 >= measure_from:
                    errors += 1
                    first_error = first_error or str(exc)
                continue
            if t0 >= measure_from:
                latencies.append((time.perf_counter() - t0) * 1e6)

    await asyncio.gather(*(worker(call, payloads[i % len(payloads)])
                           for i, call in enumerate(calls)))
    elapsed = time.perf_counter() - measure_from
    return Measurement(len(calls), batch, elapsed, tuple(sorted(latencies)), errors,
                       first_error)


def measure(target: str, payloads: Sequence[bytes], *, concurrency: int, seconds: float,
            warmup_s: float = 0.5, batch: int = 1, protocol: str = "grpc") -> Measurement:
    """:func:`closed_loop` from synchronous code."""
    return asyncio.run(closed_loop(target, payloads, concurrency=concurrency, seconds=seconds,
                                   warmup_s=warmup_s, batch=batch, protocol=protocol))
