"""AgentServer start/serve/stop with a real data plane: health goes NOT_SERVING -> SERVING ->
NOT_SERVING, and a busy TCP port is reported clearly."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edge_agent.config import load_config
from edge_agent.core.dataplane import DataPlane
from edge_agent.errors import ConfigError
from edge_agent.server import AgentServer

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _status(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        request = health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService")
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=30).status


def test_health_follows_the_lifecycle(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    config = load_config(state_dir=tmp_path, grpc_address="127.0.0.1:0")
    dataplane = DataPlane(tmp_path, autoload=False)
    server = AgentServer(dataplane, config)
    try:
        addresses = server.start()
        assert addresses.uds == tmp_path / "run" / "inference.sock"
        assert _status(addresses.tcp) == NOT_SERVING
        dataplane.load_all()
        server.mark_serving()
        assert _status(f"unix:{addresses.uds}") == SERVING
        busy = load_config(state_dir=tmp_path, grpc_address=addresses.tcp, no_uds=True)
        with pytest.raises(ConfigError, match=r"grpc\.address"):
            AgentServer(dataplane, busy).start()
    finally:
        server.stop(grace=1.0)
        dataplane.close()
    request = health_pb2.HealthCheckRequest(service="")
    assert server.health.Check(request, None).status == NOT_SERVING
    assert not (tmp_path / "run" / "inference.sock").exists()
