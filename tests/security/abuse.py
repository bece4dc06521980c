"""Helpers of the abuse tests: an in-process agent with chosen [grpc] limits serving the MLP,
and idle inference streams held open by a test (and always closed by it)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from edge_agent.client.agent_client import AgentClient
from edge_agent.config import AgentConfig, GrpcConfig
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.harness import InProcessAgent, run_configured, sections


@contextlib.contextmanager
def limited_agent(state_dir: Path, bundles: Bundles, *, deploy: bool = True,
                  uds: Path | None = None, **grpc_limits: Any) -> Iterator[InProcessAgent]:
    """A running agent (TCP 127.0.0.1:0, the Unix socket ``uds`` if given, management on) with
    ``grpc_limits`` in its [grpc] section, serving mlp v1 when ``deploy``; stopped on exit."""
    config = AgentConfig(state_dir=state_dir,
                         grpc=GrpcConfig(address="127.0.0.1:0", uds=uds,
                                         uds_enabled=uds is not None, **grpc_limits))
    # the clients below speak plaintext
    options = sections("abuse", bundles.public_key, insecure=True)
    agent = run_configured(config, options)
    try:
        if deploy:
            with AgentClient(agent.management, token=agent.token) as client:
                assert client.deploy(bundles.mlp[1]).ok
        yield agent
    finally:
        agent.stop()


class IdleStreams:
    """``n`` ModelStreamInfer calls on one channel that send nothing until closed.

    ``outcomes`` gets each stream's end: "OK", or the status code name and details."""

    def __init__(self, target: str, n: int, *, send_first: pb.ModelInferRequest | None = None
                 ) -> None:
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        self.n = n
        self.first = send_first
        self.release = threading.Event()
        self.outcomes: list[str] = []
        self.answers = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._calls: list[Any] = []

    def _requests(self) -> Iterator[pb.ModelInferRequest]:
        if self.first is not None:
            yield self.first
        self.release.wait(120)

    def _hold(self) -> None:
        call = self.stub.ModelStreamInfer(self._requests(), timeout=120)
        with self._lock:
            self._calls.append(call)
        outcome = "OK"
        try:
            for _ in call:
                with self._lock:
                    self.answers += 1
        except grpc.RpcError as exc:
            outcome = f"{exc.code().name}: {exc.details()}"
        with self._lock:
            self.outcomes.append(outcome)

    def __enter__(self) -> IdleStreams:
        for _ in range(self.n):
            t = threading.Thread(target=self._hold, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            call.cancel()
        for t in self._threads:
            t.join(30)
        self.channel.close()


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def peak_growth_mib(pid: int, action: Callable[[], object]) -> float:
    """How far process ``pid``'s RSS peaked above where it was while ``action`` ran (the
    kernel's high-water mark, reset first where allowed; otherwise the peak since start)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before = _status_kib(pid, "VmRSS")
    except OSError:
        before = _status_kib(pid, "VmHWM")
    action()
    return (_status_kib(pid, "VmHWM") - before) / 1024
