"""The composition root (edge_agent/agent.py): the parts exist only while the agent runs, and
a start that fails half-way stops what it had started (the state directory's lock first of
all, so the next start is not refused)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from edge_agent.agent import Agent
from edge_agent.config import AgentConfig, DiscoveryConfig, GrpcConfig, HttpConfig
from edge_agent.errors import AgentError, ConfigError
from edge_agent.state.lock import claim_state_dir


def _config(state: Path, grpc: str = "127.0.0.1:0", http: str | None = None) -> AgentConfig:
    return AgentConfig(state_dir=state, grpc=GrpcConfig(address=grpc, uds_enabled=False),
                       http=HttpConfig(listen=http), discovery=DiscoveryConfig(enabled=False))


def test_the_parts_are_named_when_the_agent_is_not_running(tmp_path: Path) -> None:
    agent = Agent(_config(tmp_path / "state"))
    with pytest.raises(AgentError, match="state directory is not open"):
        _ = agent.token
    with pytest.raises(AgentError, match="data plane is not running"):
        _ = agent.dataplane
    assert agent.management is None and agent.management_address is None


@pytest.mark.parametrize("busy", ["grpc", "http"])
def test_a_start_that_fails_stops_what_it_started(tmp_path: Path, busy: str) -> None:
    state = tmp_path / "state"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        config = _config(state, grpc=address) if busy == "grpc" else \
            _config(state, http=address)
        agent = Agent(config, grace=0.5)
        with pytest.raises(ConfigError, match=f"cannot listen on {address}"):
            agent.run(stop_event=threading.Event())
    claim_state_dir(state, role="test").release()  # the failed agent let go of the lock
    with pytest.raises(AgentError, match="front ends are not running"):
        _ = agent.addresses


def test_a_stop_before_ready_never_reports_ready(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()  # a SIGTERM while the models load
    seen: list[Agent] = []
    assert Agent(_config(tmp_path / "state")).run(seen.append, stop) == 0
    assert seen == []
    claim_state_dir(tmp_path / "state", role="test").release()
