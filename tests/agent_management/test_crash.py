"""kill -9 of a real agent process at each step of a deploy: the restarted agent serves the
previous active version, has no half-extracted version on disk, and its history shows the
interrupted deploy (EDGE_AGENT_TEST_PAUSE_AT holds the agent at the named step)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from edge_agent.client.agent_client import AgentClient, ManagementError
from edge_agent.deploy.pause import PAUSE_ENV, PAUSE_FILE
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess

STEPS = ("received", "verified", "staged", "loaded", "warmed", "probed", "parity", "switched",
         "drained", "unloaded")
X = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)


def _serves_version_1(agent: AgentProcess, bundles: Bundles) -> None:
    import tritonclient.grpc as tc

    with tc.InferenceServerClient(agent.grpc) as triton:
        inp = tc.InferInput("input", [2, 64], "FP32")
        inp.set_data_from_numpy(X)
        result = triton.infer("mlp", [inp])
    assert result.get_response().model_version == "1"
    np.testing.assert_allclose(result.as_numpy("probs"), bundles.reference(1, X), rtol=1e-4,
                               atol=1e-5)


def _check_recovered(agent: AgentProcess, client: AgentClient, bundles: Bundles,
                     killed_at: str | None) -> None:
    state = agent.state_dir
    active = [v.version for v in client.models("mlp") if v.active]
    assert active == [1]
    assert sorted(p.name for p in (state / "models" / "mlp").iterdir()) == ["1"]
    incoming = state / "incoming"
    assert not incoming.exists() or not any(incoming.iterdir())
    _serves_version_1(agent, bundles)
    if killed_at is not None:
        latest = client.deployments("mlp", limit=1)[0]
        assert (latest.kind, latest.to_version, latest.from_version) == ("deploy", 2, 1)
        assert latest.status == "interrupted"
        assert latest.last_step == killed_at
        assert f"last step reached: {killed_at}" in latest.reason


@pytest.mark.slow
def test_kill_9_at_each_deploy_step_restarts_on_the_previous_version(
        bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as first, \
            AgentClient(first.management, token=(state / "management.token").read_text()
                        .strip()) as client:
        assert client.deploy(bundles.mlp[1]).ok
    token = (state / "management.token").read_text().strip()
    killed_at: str | None = None
    for step in STEPS:
        agent = AgentProcess(state, trust=bundles.public_key, env={PAUSE_ENV: step})
        agent.start()
        try:
            with AgentClient(agent.management, token=token) as client:
                _check_recovered(agent, client, bundles, killed_at)
                errors: list[BaseException] = []

                def deploy(client: AgentClient = client, errors: list = errors) -> None:
                    try:
                        client.deploy(bundles.mlp[2])
                    except ManagementError as exc:  # the agent dies mid-call
                        errors.append(exc)

                caller = threading.Thread(target=deploy, daemon=True)
                caller.start()
                agent.wait_for_file(state / PAUSE_FILE)
                assert (state / PAUSE_FILE).read_text() == step
                agent.kill()
                caller.join(60)
                assert not caller.is_alive() and errors, "the deploy call did not fail"
        finally:
            agent.kill()
        (state / PAUSE_FILE).unlink()
        killed_at = step
    with AgentProcess(state, trust=bundles.public_key) as last, \
            AgentClient(last.management, token=token) as client:
        _check_recovered(last, client, bundles, killed_at)
        history = client.deployments("mlp", limit=20)
        assert [d.status for d in history[:len(STEPS)]] == ["interrupted"] * len(STEPS)
        assert [d.last_step for d in history[:len(STEPS)]] == list(reversed(STEPS))
        # and the agent still deploys normally afterwards
        assert client.deploy(bundles.mlp[2]).ok
        assert [v.version for v in client.models("mlp") if v.active] == [2]
