"""Cancellation and deadlines end to end (issue 25): a real agent in-process (KServe gRPC and
HTTP on 127.0.0.1, the spin model on ONNX Runtime), callers that give up while their request
waits in the queue.

The test holds the device's only execution slot (``max_concurrent_executions = 1``) so that a
first request holds the model's only instance and everything after it queues, for as long as
the test needs; what ran is proven from the model's statistics (inference and execution
counts), never from timing.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest

from edge_agent.config import DiscoveryConfig, MetricsConfig, load_config
from edge_agent.core.batcher import DynamicBatcher
from edge_agent.core.types import InferRequest, ModelStats
from edge_agent.errors import RequestCancelledError
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from tests.agent_core.conftest import Bundles
from tests.support.cli import console
from tests.support.core_bundles import install
from tests.support.eventually import eventually
from tests.support.harness import InProcessAgent, running, sections
from tests.support.spin_model import spin_input
from tests.support.traffic import infer_request

DEADLINE_S = 120.0
LATE = 50  # requests that give up while queued


@pytest.fixture
def agent(bundles: Bundles, tmp_path: Path) -> Iterator[InProcessAgent]:
    state = tmp_path / "state"
    install(bundles.spin, state)
    toml = tmp_path / "agent.toml"
    toml.write_text("[agent]\nmax_concurrent_executions = 1\n"
                    "[grpc]\nworkers = 64\nmax_concurrent_streams = 128\n"
                    "[http]\nmax_connections = 64\n"
                    "[models.spin]\ninstances = 1\n")
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0", no_uds=True,
                         http_address="127.0.0.1:0")
    quiet = dataclasses.replace(config, discovery=DiscoveryConfig(enabled=False),
                                metrics=MetricsConfig(enabled=False))
    with running(quiet, sections("cancellation-agent", insecure=True, metrics=False),
                 timeout_s=DEADLINE_S, name="cancellation-agent") as served:
        yield served


class _HeldSlot:
    """The test holds the agent's only execution slot; a first request (gRPC) then holds the
    model's only instance, waiting for the slot, until :meth:`release` (which checks that it
    was served). A context manager: the slot and the channel are given back on exit."""

    def __init__(self, agent: InProcessAgent) -> None:
        self.plane = agent.dataplane
        self.before: ModelStats = self.plane.statistics("spin")[0]
        self.batcher: DynamicBatcher = self.plane.repository.resolve("spin").batcher
        self._channel = grpc.insecure_channel(agent.grpc)
        self.stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        self._pool = ThreadPoolExecutor(1)
        self.gate = self.plane.gate
        self.gate.acquire(1)
        self._released = False
        self.first = self._pool.submit(self.stub.ModelInfer,
                                       infer_request("spin", spin_input()), timeout=DEADLINE_S)
        eventually(lambda: self.gate.waiting == 1, timeout=DEADLINE_S,
                   message="the first request never reached the execution slot")

    def release(self) -> None:
        """Give the slot back; the first request then runs and is answered."""
        if not self._released:
            self._released = True
            self.gate.release()
            assert self.first.result(DEADLINE_S).model_name == "spin"

    def delta(self) -> dict[str, int]:
        """What the model counted since the test began."""
        after, before = self.plane.statistics("spin")[0], self.before
        return {"inferences": after.inference_count - before.inference_count,
                "executions": after.execution_count - before.execution_count,
                "cancelled": after.cancel.count - before.cancel.count,
                "failed": after.fail.count - before.fail.count,
                "succeeded": after.success.count - before.success.count}

    def __enter__(self) -> _HeldSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._released:
            self._released = True
            self.gate.release()
        self._pool.shutdown(wait=True)
        self._channel.close()


def test_requests_past_their_grpc_deadline_leave_the_queue_unrun(
        agent: InProcessAgent) -> None:
    with _HeldSlot(agent) as held:
        stub = held.stub

        def past_deadline(n: int, deadline_s: float, queued: int = 0) -> None:
            """``n`` requests with a ``deadline_s`` deadline, each ending DEADLINE_EXCEEDED,
            then out of the queue with no instance ever coming to them (before this change
            they stayed queued and ran once the slot was free); ``queued``: seen queued
            first."""
            calls = [stub.ModelInfer.future(infer_request("spin", spin_input()),
                                            timeout=deadline_s) for _ in range(n)]
            if queued:
                eventually(lambda: held.batcher.inflight == 1 + queued, timeout=DEADLINE_S,
                           message="the requests never queued")
            for call in calls:
                with pytest.raises(grpc.RpcError) as err:
                    call.result(timeout=DEADLINE_S)
                assert err.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            eventually(lambda: held.batcher.inflight == 1, timeout=60,
                       message="requests past their deadline are still queued")

        past_deadline(LATE, 0.005)
        # gRPC drops those whose deadline passed before a handler thread took them (the
        # model never sees them); these ten are seen queued first, so all ten are counted
        counted = held.delta()["cancelled"]
        past_deadline(10, 5.0, queued=10)
        assert held.delta()["cancelled"] == counted + 10
        held.release()
        reply = stub.ModelInfer(infer_request("spin", spin_input()), timeout=DEADLINE_S)
        assert len(reply.raw_output_contents) == 1  # a normal request right after is served
        delta = held.delta()
        served = stub.ModelStatistics(pb.ModelStatisticsRequest(name="spin"), timeout=30)
    # none of the 60 ran: two requests, two executions. Every one the agent received is
    # counted cancelled (and failed, as Triton counts a cancelled request)
    assert (delta["inferences"], delta["executions"], delta["succeeded"]) == (2, 2, 2), delta
    assert 10 <= delta["cancelled"] <= LATE + 10, delta
    assert delta["failed"] == delta["cancelled"], delta
    stats = served.model_stats[0].inference_stats
    assert stats.fail.count - held.before.fail.count == delta["cancelled"]


def test_requests_cancelled_by_their_grpc_caller_leave_the_queue_unrun(
        agent: InProcessAgent, tmp_path: Path) -> None:
    with _HeldSlot(agent) as held:
        waiting = [held.stub.ModelInfer.future(infer_request("spin", spin_input()),
                                               timeout=DEADLINE_S) for _ in range(20)]
        eventually(lambda: held.batcher.inflight == 21, timeout=DEADLINE_S,
                   message="the requests never queued")
        for call in waiting:
            assert call.cancel()
        # each call's end takes it out of the queue at once, before any instance is free
        eventually(lambda: held.batcher.inflight == 1, timeout=DEADLINE_S,
                   message="cancelled requests are still queued")
        assert held.delta()["cancelled"] == 20
        held.release()
        assert held.delta() == {"inferences": 1, "executions": 1, "cancelled": 20,
                                "failed": 20, "succeeded": 1}
    # the agent's own views: ListModels and edge-console status
    with agent.client() as client:
        (listed,) = client.models("spin")
    assert listed.cancelled_requests == held.before.cancel.count + 20
    token = tmp_path / "token"
    token.write_text(agent.token)
    status = console(None, "status", "--insecure", "--agent", agent.management,
                     "--token-file", str(token))
    assert status.code == 0, status.err
    assert "cancelled" in status.out
    assert f"│ {listed.cancelled_requests} " in status.out, status.out


def _metrics(address: str) -> str:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def test_requests_whose_http_connection_closed_are_dropped_unrun(
        agent: InProcessAgent) -> None:
    host, port = agent.http.rsplit(":", 1)
    body = json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                                   "data": spin_input().ravel().tolist()}]})

    def post(conn: http.client.HTTPConnection) -> http.client.HTTPConnection:
        conn.request("POST", "/v2/models/spin/infer", body=body,
                     headers={"Content-Type": "application/json"})
        return conn

    with _HeldSlot(agent) as held:
        hung_up = [post(http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S))
                   for _ in range(10)]
        eventually(lambda: held.batcher.inflight == 11, timeout=DEADLINE_S,
                   message="the HTTP requests never queued")
        for conn in hung_up:
            conn.close()  # the callers hang up without reading an answer
        held.release()  # an instance comes to them: their connections are closed
        eventually(lambda: held.batcher.inflight == 0, timeout=DEADLINE_S,
                   message="the dropped HTTP requests were never answered")
        fresh = post(http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S))
        try:
            answer = fresh.getresponse()
            assert answer.status == 200
            assert json.loads(answer.read())["outputs"][0]["name"] == "probs"
        finally:
            fresh.close()
        assert held.delta() == {"inferences": 2, "executions": 2, "cancelled": 10,
                                "failed": 10, "succeeded": 2}
    text = _metrics(agent.http)
    assert 'nv_inference_request_failure{model="spin",reason="CANCELED",version="1"} 10.0' \
        in text, [line for line in text.splitlines() if "failure" in line]


def test_a_request_whose_caller_is_gone_on_arrival_is_not_run(agent: InProcessAgent) -> None:
    """The core's side of the contract with no front end: a caller already gone."""
    plane = agent.dataplane
    batcher: DynamicBatcher = plane.repository.resolve("spin").batcher
    before = batcher.snapshot_stats()
    called: list[int] = []

    class Gone:
        def is_active(self) -> bool:
            return False

        def add_callback(self, callback: object) -> bool:
            called.append(1)
            return False

    with pytest.raises(RequestCancelledError, match=r"'spin'.*cancelled by its caller"):
        plane.infer(InferRequest("spin", {"input": spin_input()}, caller=Gone()))
    after = batcher.snapshot_stats()
    assert (after.cancel.count - before.cancel.count,
            after.inference_count - before.inference_count) == (1, 0)
    assert not called
    result = plane.infer(InferRequest("spin", {"input": spin_input()}))
    assert result.outputs["probs"].shape == (1, 10)
    assert np.isfinite(result.outputs["probs"]).all()
