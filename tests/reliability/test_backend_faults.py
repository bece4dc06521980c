"""A backend that fails or hangs inside an inference, on a real agent process serving a second,
healthy model: the failing request gets a clear status, the model's instance keeps (or gets
back to) serving, and callers of the other model see nothing."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest

from edge_agent.client.agent_client import AgentClient
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from packager.build import build_bundles
from tests.support.bundles import PROFILE, Bundles
from tests.support.harness import AgentProcess
from tests.support.models import make_fragile_model
from tests.support.traffic import Bystander, infer_request


def _bundle(bundles: Bundles, tmp: Path, name: str, source: Path) -> Path:
    (bundle,) = build_bundles(source, name=name, version=1, profiles=[PROFILE],
                              out_dir=tmp / "out", key_path=bundles.private_key,
                              dynamic_batch=True)
    return bundle


@pytest.mark.slow
def test_a_backend_failing_inside_inference_fails_only_thatinfer_request(
        bundles: Bundles, tmp_path: Path) -> None:
    fragile = _bundle(bundles, tmp_path, "fragile", make_fragile_model(tmp_path / "f.onnx"))
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as agent:
        token = (state / "management.token").read_text().strip()
        with AgentClient(agent.management, token=token) as client:
            assert client.deploy(bundles.mlp[1]).ok
            assert client.deploy(fragile).ok
        with Bystander(agent.grpc) as bystander, \
                grpc.insecure_channel(agent.grpc) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            bad = np.full((1, 64), 50.0, np.float32)  # Gather index out of range in ORT
            for _ in range(5):
                with pytest.raises(grpc.RpcError) as err:
                    stub.ModelInfer(infer_request("fragile", bad), timeout=60)
                assert err.value.code() is grpc.StatusCode.INTERNAL, err.value.details()
                details = err.value.details() or ""
                assert "inference failed" in details and "'fragile' version 1" in details, details
                # the same instance serves the next good request
                good = np.full((1, 64), 3.0, np.float32)
                reply = stub.ModelInfer(infer_request("fragile", good), timeout=60)
                assert np.isfinite(np.frombuffer(reply.raw_output_contents[0],
                                                 np.float32)).all()
            stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="fragile"), timeout=30)
            counts = stats.model_stats[0].inference_stats
            # + the health probe and the 2 parity-check requests of the deploy
            assert (counts.fail.count, counts.success.count) == (5, 5 + 1 + 2)
        assert bystander.ok > 0 and not bystander.failures, bystander.failures[:3]
