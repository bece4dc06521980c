"""An agent on a grpcio without the hooks its abuse protections use (simulated: the self-test
is made to find each hook missing) still serves on grpcio's public behaviour, and says once
which protections are reduced."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edge_agent import grpc_internals
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.management.auth import bearer
from edge_agent.management.generated import management_pb2 as mpb
from edge_agent.management.generated import management_pb2_grpc as mpb_grpc
from tests.security.abuse import limited_agent
from tests.support.bundles import Bundles
from tests.support.traffic import X, infer_request

LOGGER = "edge_agent.grpc_internals"


@pytest.fixture
def no_hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every hook missing: grpc reads neither attribute the agent sets, the event is not
    where the agent looks, and grpc uses more of a Future than a lean call provides."""
    monkeypatch.setattr(grpc_internals, "THREAD_POOL_ATTR", "experimental_pool_renamed")
    monkeypatch.setattr(grpc_internals, "NON_BLOCKING_ATTR", "experimental_callback_renamed")
    monkeypatch.setattr(grpc_internals, "EVENT_INDEX", 0)
    monkeypatch.setattr(grpc_internals, "FUTURE_METHODS", frozenset())
    grpc_internals.reset()
    yield
    grpc_internals.reset()


def test_without_the_hooks_the_agent_serves_and_warns_once(
        no_hooks: None, bundles: Bundles, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    with limited_agent(tmp_path / "state", bundles, workers=2) as agent, \
            grpc.insecure_channel(agent.grpc) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        reply = stub.ModelInfer(infer_request("mlp", X[:1]), timeout=30)
        out = np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(1, 10)
        np.testing.assert_allclose(out, bundles.reference(1, X[:1]), rtol=1e-4, atol=1e-5)
        # ModelStreamInfer answers through grpc's blocking iterator instead
        answers = list(stub.ModelStreamInfer(iter([infer_request("mlp", X[:2])]), timeout=30))
        assert len(answers) == 1 and not answers[0].error_message
        streamed = np.frombuffer(answers[0].infer_response.raw_output_contents[0],
                                 np.float32).reshape(2, 10)
        np.testing.assert_allclose(streamed, bundles.reference(1, X[:2]), rtol=1e-4, atol=1e-5)
        check = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        # a wrong management token is still refused (at once: the blocking denial)
        with grpc.insecure_channel(agent.management) as mgmt:
            with pytest.raises(grpc.RpcError) as info:
                mpb_grpc.AgentManagementStub(mgmt).GetInfo(
                    mpb.GetInfoRequest(), metadata=bearer("wrong"), timeout=30)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert mpb_grpc.AgentManagementStub(mgmt).GetInfo(
                mpb.GetInfoRequest(), metadata=bearer(agent.token), timeout=30).agent_id
    warnings = [r.getMessage() for r in caplog.records
                if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "missing thread_pool, non_blocking, lean_future, rpc_event" in warnings[0]
    assert "abuse protections are reduced" in warnings[0]
    assert "grpc.request_arrival_s is not enforced" in warnings[0]
