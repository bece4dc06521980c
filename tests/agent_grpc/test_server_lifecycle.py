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


def test_health_watch_streams_each_change_and_holds_no_health_thread(tmp_path: Path) -> None:
    """Watch (grpc_health's own client) sends the current status, then each change; eight open
    Watch streams (twice the health pool's threads) leave Check answering."""
    (tmp_path / "models").mkdir()
    config = load_config(state_dir=tmp_path, grpc_address="127.0.0.1:0", no_uds=True)
    dataplane = DataPlane(tmp_path, autoload=False)
    server = AgentServer(dataplane, config)
    try:
        target = server.start().tcp
        with grpc.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watches = [stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
                       for _ in range(8)]
            unknown = stub.Watch(health_pb2.HealthCheckRequest(service="nope"), timeout=60)
            assert [next(w).status for w in watches] == [NOT_SERVING] * 8
            assert next(unknown).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
            assert _status(target) == NOT_SERVING  # Check still answers beside 9 watches
            server.mark_serving()
            assert [next(w).status for w in watches] == [SERVING] * 8
            with pytest.raises(grpc.RpcError) as missing:
                stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=30)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
            server.health.enter_graceful_shutdown()
            assert next(watches[0]).status == NOT_SERVING
            server.mark_serving()  # ignored once shutting down
            assert _status(target) == NOT_SERVING
            for w in [*watches, unknown]:
                w.cancel()
    finally:
        server.stop(grace=1.0)
        dataplane.close()
