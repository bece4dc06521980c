"""Access to the management API: a token works only on its own agent, secrets never reach the
logs (a real agent process at DEBUG through a whole deploy/rollback cycle), and secret files
have private modes."""

from __future__ import annotations

import base64
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from edge_agent.client.agent_client import AgentClient, AuthenticationError
from edge_agent.management.auth import bearer
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess, InProcessAgent, sections, start_agent, trusted_agent


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def two_agents(bundles: Bundles, tmp_path: Path) -> Iterator[tuple[InProcessAgent, ...]]:
    agents: list[InProcessAgent] = []
    try:
        for name in ("a", "b"):
            options = sections(f"agent-{name}", bundles.public_key)
            agents.append(start_agent(tmp_path / name, options))
        yield tuple(agents)
    finally:
        for agent in agents:
            agent.stop()


def test_a_token_replayed_against_another_agent_is_refused(
        two_agents: tuple[InProcessAgent, InProcessAgent], bundles: Bundles) -> None:
    a, b = two_agents
    assert a.token != b.token and len(a.token) >= 32
    with AgentClient(a.management, token=a.token) as own:
        assert own.deploy(bundles.mlp[1]).ok
        history = [d.id for d in own.deployments()]
    for victim, stolen in ((a, b.token), (b, a.token)):
        with AgentClient(victim.management, token=stolen) as replay:
            for call in (replay.info, replay.models, lambda: replay.deploy(bundles.mlp[2]),
                         lambda: replay.rollback("mlp"), lambda: replay.remove("mlp", 1)):
                with pytest.raises(AuthenticationError):
                    call()
        # the raw call, with the header exactly as a sniffer would have captured it
        with grpc.insecure_channel(victim.management) as channel:
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.AgentManagementStub(channel).ListModels(
                    pb.ListModelsRequest(), metadata=bearer(stolen), timeout=10)
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    with AgentClient(a.management, token=a.token) as own:
        assert [d.id for d in own.deployments()] == history
        assert [(v.version, v.active) for v in own.models("mlp")] == [(1, True)]
    with AgentClient(b.management, token=b.token) as other:
        assert other.models() == [] and other.deployments() == []


def _pem_body(path: Path) -> list[str]:
    """The base64 lines of a PEM file (what a leak would show)."""
    return [line for line in path.read_text().splitlines()
            if line and not line.startswith("-----")]


def test_token_and_private_key_never_reach_the_logs_at_debug(bundles: Bundles,
                                                             tmp_path: Path) -> None:
    state = tmp_path / "state"
    agent = AgentProcess(state, trust=bundles.public_key, env={"GRPC_VERBOSITY": "DEBUG"})
    agent.args[3:3] = ["--log-level", "DEBUG"]  # a global option, before "serve"
    with agent:
        token = (state / "management.token").read_text().strip()
        with AgentClient(agent.management, token=token) as client:
            assert client.deploy(bundles.mlp[1]).ok
            assert client.deploy(bundles.mlp[2]).ok
            assert client.rollback("mlp").ok
            assert not client.deploy(bundles.unsigned).ok
            client.query_metrics("mlp")
        with AgentClient(agent.management, token=token[:-1] + "x") as wrong, \
                pytest.raises(AuthenticationError):
            wrong.info()
    log = "".join(agent.output)
    assert "DEBUG" in log  # the capture really ran at DEBUG
    assert "deployment" in log or "deploy" in log
    assert token not in log and token[:16] not in log
    private_der = base64.b64decode("".join(_pem_body(bundles.private_key)))
    for secret in (*_pem_body(bundles.private_key), private_der.hex(),
                   base64.b64encode(private_der[-32:]).decode(), private_der[-32:].hex()):
        assert secret not in log
    # nor in the databases the agent writes
    for db in state.glob("*.db*"):
        assert token.encode() not in db.read_bytes(), db


def test_secret_files_are_private(agent_with_model: InProcessAgent, bundles: Bundles) -> None:
    state = agent_with_model.state_dir
    assert _mode(state / "management.token") == 0o600
    assert _mode(bundles.private_key) == 0o600  # edge-pack's signing key
    assert _mode(state / "incoming") == 0o700  # uploads before verification
    for path in state.rglob("*"):
        assert not _mode(path) & 0o002, f"{path} is world-writable"


def test_a_loose_token_file_is_tightened_at_start(bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = start_agent(state, sections("test-agent", watch_window_s=60.0))
    first.stop()
    (state / "management.token").chmod(0o644)
    again = start_agent(state, sections("test-agent", watch_window_s=60.0))
    try:
        assert _mode(state / "management.token") == 0o600
    finally:
        again.stop()


@pytest.fixture
def agent_with_model(bundles: Bundles, tmp_path: Path) -> Iterator[InProcessAgent]:
    with trusted_agent(tmp_path / "state", bundles.public_key, deploy=bundles.mlp[1]) as agent:
        yield agent


def test_token_rotation_takes_effect_on_a_running_agent_without_restart(
        bundles: Bundles, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edge_agent.cli import main as agent_cli

    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key, extra=["--no-mdns"]) as agent:
        old = (state / "management.token").read_text().strip()
        with AgentClient(agent.management, token=old) as client:
            assert client.deploy(bundles.mlp[1]).ok
        capsys.readouterr()
        assert agent_cli(["token", "--state-dir", str(state), "--rotate"]) == 0
        out = capsys.readouterr()
        new = out.out.strip()
        assert new != old and len(new) >= 32 and "no longer accepted" in out.err
        assert _mode(state / "management.token") == 0o600
        assert [p.name for p in state.iterdir() if p.name.startswith(".management")] == []
        with AgentClient(agent.management, token=old) as stale, \
                pytest.raises(AuthenticationError):
            stale.models()
        with AgentClient(agent.management, token=new) as client:
            assert [(v.model, v.version, v.active) for v in client.models()] == [
                ("mlp", 1, True)]
        assert agent_cli(["token", "--state-dir", str(state)]) == 0
        assert capsys.readouterr().out.strip() == new
