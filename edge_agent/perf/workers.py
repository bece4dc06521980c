"""The gRPC closed loop in worker processes, so that the load generator is not the limit.

One Python process cannot keep a gRPC server busy and measure it fairly: its calls share one
GIL, and at one call in flight every microsecond the client spends is in the measured latency
(and on a machine the client shares with the server, in the server's CPU too). Each worker
here is a process of its own (``python -m edge_agent.perf.workers TARGET``); each call in
flight is a thread with its own HTTP/2 connection making the request serialized once with
:class:`~edge_agent.perf.h2unary.H2Unary` (~80 µs of CPU per call where grpcio's synchronous
call costs ~300 µs and ``grpc.aio`` more: ``benchmarks/bench_perf_agreement.py`` compares
them with perf_analyzer).

A level runs in two phases with a barrier between them: every worker warms up, finishes its
call in flight and waits; the caller reads the server's statistics; then every worker runs the
measured window and returns its latencies. The server is quiet at both snapshots, so the
requests the client counts are exactly the requests the server's statistics count (when
nobody else is calling the model).

The parent speaks to a worker over its stdin/stdout with pickled tuples; a worker whose stdin
closes (its parent gone) exits.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from edge_agent.errors import AgentError
from edge_agent.perf.h2unary import H2Unary, UnaryCallFailed

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 256 << 20),
                   ("grpc.max_send_message_length", 256 << 20)]
READY_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 300.0


class WorkerError(AgentError):
    """A worker process could not connect, or died."""


@dataclass(frozen=True)
class WorkerResult:
    """One worker's measured window: latencies (µs) of its answered calls, its failures, and
    the monotonic time its last call ended."""

    latencies_us: list[float]
    errors: int
    first_error: str
    ended: float


class WorkerProcess:
    """One worker process and its pipes."""

    def __init__(self, target: str) -> None:
        root = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
        self.proc = subprocess.Popen([sys.executable, "-m", "edge_agent.perf.workers", target],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def send(self, message: tuple[Any, ...]) -> None:
        assert self.proc.stdin is not None
        try:
            pickle.dump(message, self.proc.stdin)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerError(f"a perf worker process exited (code {self.proc.poll()}): "
                              f"{exc}") from None

    def receive(self) -> Any:
        assert self.proc.stdout is not None
        try:
            message = pickle.load(self.proc.stdout)
        except EOFError:
            code = self.proc.wait()
            raise WorkerError(f"a perf worker process exited (code {code}); its error is "
                              "above") from None
        if isinstance(message, tuple) and message and message[0] == "failed":
            raise WorkerError(str(message[1]))
        return message

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def split(concurrency: int, processes: int) -> list[int]:
    """``concurrency`` calls over ``processes`` workers as evenly as possible."""
    base, extra = divmod(concurrency, processes)
    return [base + (1 if i < extra else 0) for i in range(processes)]


class WorkerPool:
    """Worker processes for one target, started as levels need them and kept until
    :meth:`close` (a context manager). ``max_processes`` caps the processes; the calls in
    flight are spread over them as threads (default: one process per call in flight, at most
    twice the CPU count)."""

    def __init__(self, target: str, max_processes: int | None = None) -> None:
        self.target = target
        self.max_processes = max(1, max_processes or 2 * (os.cpu_count() or 1))
        self.workers: list[WorkerProcess] = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure(self, n: int) -> list[WorkerProcess]:
        new = [WorkerProcess(self.target) for _ in range(n - len(self.workers))]
        self.workers += new
        for w in new:
            if w.receive() != ("ready",):
                raise WorkerError("a perf worker process answered out of turn")
        return self.workers[:n]

    def run(self, payloads: Sequence[bytes], *, concurrency: int, seconds: float,
            warmup_s: float, between: Callable[[], None] = lambda: None
            ) -> tuple[list[WorkerResult], float]:
        """Warm up, call ``between()`` with every worker paused (nothing in flight), run the
        measured window; returns every worker's result and the window's start (monotonic)."""
        shares = split(concurrency, min(concurrency, self.max_processes))
        workers = self._ensure(len(shares))
        index = 0
        for worker, threads in zip(workers, shares, strict=True):
            mine = [payloads[(index + i) % len(payloads)] for i in range(threads)]
            index += threads
            worker.send(("warm", mine, warmup_s))
        for worker in workers:
            worker.receive()
        between()
        start = time.monotonic()
        for worker in workers:
            worker.send(("go", start + seconds))
        return [worker.receive() for worker in workers], start

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.workers = []


def _closed_loop(target: str, payload: bytes, until: float, latencies: list[float] | None,
                 errors: list[str]) -> None:
    """Call again and again on a connection of its own until ``until`` (monotonic);
    latencies (µs) when given."""
    call = H2Unary(target, INFER_METHOD, CALL_TIMEOUT_S)
    try:
        while True:
            t0 = time.perf_counter()
            if time.monotonic() >= until:
                return
            try:
                call(payload)
            except UnaryCallFailed as exc:
                errors.append(str(exc) if exc.connection or errors else
                              _why(target, payload, str(exc)))
                continue
            if latencies is not None:
                latencies.append((time.perf_counter() - t0) * 1e6)
    finally:
        call.close()


def _why(target: str, payload: bytes, fallback: str) -> str:
    """A refused call's gRPC status and message, asked again through grpcio (H2Unary does
    not decode the answer's headers)."""
    import grpc

    with grpc.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        try:
            channel.unary_unary(INFER_METHOD, request_serializer=None,
                                response_deserializer=None)(payload, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    return fallback


def _threads(target: str, payloads: list[bytes], until: float,
             measured: bool) -> WorkerResult:
    latencies: list[list[float]] = [[] for _ in payloads]
    errors: list[str] = []
    runners = [threading.Thread(target=_closed_loop,
                                args=(target, p, until, latencies[i] if measured else None,
                                      errors)) for i, p in enumerate(payloads)]
    for t in runners:
        t.start()
    for t in runners:
        t.join()
    return WorkerResult([x for lat in latencies for x in lat], len(errors),
                        errors[0] if errors else "", time.monotonic())


def serve(target: str, inp: IO[bytes], out: IO[bytes]) -> None:
    """A worker's life: check the server answers, say ready, then run warm-up/measure orders
    until EOF."""

    def say(message: object) -> None:
        pickle.dump(message, out)
        out.flush()

    probe = H2Unary(target, INFER_METHOD, READY_TIMEOUT_S)
    try:
        probe.connect()
    except UnaryCallFailed as exc:
        say(("failed", f"{target}: {exc}"))
        return
    finally:
        probe.close()
    say(("ready",))
    payloads: list[bytes] = []
    while True:
        try:
            order = pickle.load(inp)
        except EOFError:
            return
        if order[0] == "warm":
            payloads, warmup_s = order[1], order[2]
            _threads(target, payloads, time.monotonic() + warmup_s, measured=False)
            say(("warm",))
        elif order[0] == "go":
            say(_threads(target, payloads, order[1], measured=True))


if __name__ == "__main__":
    import signal

    # Ctrl-C is the parent's to handle: it closes our stdin, and we exit
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # through the imported module, so that what it pickles names edge_agent.perf.workers
    from edge_agent.perf.workers import serve as _serve

    _serve(sys.argv[1], sys.stdin.buffer, sys.stdout.buffer)
