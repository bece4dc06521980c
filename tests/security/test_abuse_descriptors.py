"""Connections that hold descriptors forever (issue 19): 1,100 idle TCP connections exhausted
a 1,024 descriptor limit and both ports stopped answering. A real agent process runs here with
RLIMIT_NOFILE lowered to 512 (soft and hard); idle and never-handshaking connections are closed
and the number of connections stays below the limit, so the agent keeps working."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil

from edge_agent.client.agent_client import AgentClient
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import AgentProcess
from tests.support.traffic import served_version

NOFILE = 512
_LIMIT = ("import os, resource, sys; "
          f"resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE})); "
          "os.execv(sys.argv[1], sys.argv[1:])")


class LimitedAgent(AgentProcess):
    """An agent process started under RLIMIT_NOFILE = 512 (soft and hard)."""

    def __init__(self, state_dir: Path, **kw: object) -> None:
        super().__init__(state_dir, **kw)  # type: ignore[arg-type]
        self.args = [sys.executable, "-c", _LIMIT, *self.args]


@contextlib.contextmanager
def _raw_connections(address: str, n: int) -> Iterator[list[socket.socket]]:
    host, _, port = address.rpartition(":")
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(5)
            with contextlib.suppress(OSError):  # a full backlog: this one just never connects
                s.connect((host, int(port)))
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def _get_info_ok(address: str, token: str) -> bool:
    try:
        with AgentClient(address, token=token, timeout_s=10) as client:
            return bool(client.info().agent_id)
    except Exception:
        return False


def test_idle_connections_never_exhaust_descriptors(bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = tmp_path / "agent.toml"
    config.write_text("[grpc]\nhandshake_timeout_s = 2\nconnection_idle_s = 5\n")
    with LimitedAgent(state, trust=bundles.public_key,
                      extra=["--no-mdns", "--config", str(config)]) as agent:
        assert agent.proc is not None
        proc = psutil.Process(agent.proc.pid)
        assert proc.rlimit(psutil.RLIMIT_NOFILE) == (NOFILE, NOFILE)
        token = (state / "management.token").read_text().strip()
        with AgentClient(agent.management, token=token) as client:
            assert client.deploy(bundles.mlp[1]).ok
        baseline = proc.num_fds()
        with _raw_connections(agent.grpc, 2 * NOFILE):
            # the management API (another port) and the metrics keep their descriptors
            eventually(lambda: _get_info_ok(agent.management, token),
                              message="never true: _get_info_ok(agent.management, token)")
            # connections that never speak HTTP/2 are closed, and inference answers again
            eventually(lambda: proc.num_fds() < baseline + 64,
                              message=lambda: str(proc.num_fds()))
            assert served_version(agent.grpc)[0] == "1"
        # HTTP/2 connections without calls are closed after connection_idle_s
        own_connection = [("grpc.use_local_subchannel_pool", 1)]
        channels = [grpc.insecure_channel(agent.grpc, options=own_connection)
                    for _ in range(100)]
        try:
            for ch in channels:
                pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(),
                                                                timeout=30)
            assert proc.num_fds() >= baseline + 50  # connections held (idle for < 5 s)
            eventually(lambda: proc.num_fds() < baseline + 32,
                              message=lambda: str(proc.num_fds()))
        finally:
            for ch in channels:
                ch.close()
        assert served_version(agent.grpc)[0] == "1"
        assert _get_info_ok(agent.management, token)
        out = "".join(agent.output)
        assert "Too many open files" not in out, out[-3000:]


def test_silent_connections_to_the_management_port_are_closed(bundles: Bundles,
                                                               tmp_path: Path) -> None:
    """The management port gets the same hygiene: connections that never finish the TLS
    handshake are closed, so they cannot hold the agent's descriptors."""
    state = tmp_path / "state"
    config = tmp_path / "agent.toml"
    config.write_text("[management]\nhandshake_timeout_s = 2\nconnection_idle_s = 5\n")
    with LimitedAgent(state, trust=bundles.public_key, tls=True,
                      extra=["--no-mdns", "--config", str(config)]) as agent:
        assert agent.proc is not None
        proc = psutil.Process(agent.proc.pid)
        baseline = proc.num_fds()
        with _raw_connections(agent.management, NOFILE // 2) as socks:
            connected = sum(1 for s in socks if s.fileno() >= 0)
            assert connected > 0
            # the agent drops the silent connections (the client still holds its ends) ...
            eventually(lambda: proc.num_fds() < baseline + 32,
                              message=lambda: str(proc.num_fds()))
            # ... and the inference port keeps answering meanwhile
            with grpc.insecure_channel(agent.grpc) as channel:
                live = pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(
                    pb.ServerLiveRequest(), timeout=30)
            assert live.live
        out = "".join(agent.output)
        assert "Too many open files" not in out, out[-3000:]

