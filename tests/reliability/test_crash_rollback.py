"""kill -9 of a real agent process at each step of a rollback, an activate and a forced reload
(and at two deploy steps; tests/agent_management/test_crash.py kills deploys at all nine): the
restarted agent serves the version that was active, versions 1 and 2 stay on disk, nothing
half-done is left, the history records the interrupted change with its last step, and every
database passes ``PRAGMA integrity_check``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edge_agent.client.agent_client import AgentClient, ManagementError
from edge_agent.deploy.pause import PAUSE_ENV, PAUSE_FILE
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess
from tests.support.traffic import X, integrity, served_version

SWITCH_STEPS = ("loaded", "warmed", "probed", "switched", "drained", "unloaded")
# (what the killed call does, the step it is killed at, the deployment kind it records)
CASES: list[tuple[str, str, str]] = (
    [("rollback", s, "rollback") for s in SWITCH_STEPS]
    + [("activate", s, "activate") for s in ("probed", "switched")]
    + [("reload", s, "activate") for s in ("warmed", "switched")]
    # deploys are covered step by step by test_crash.py; here for the databases' integrity
    + [("deploy", s, "deploy") for s in ("staged", "switched")])


def _call(client: AgentClient, what: str, bundles: Bundles) -> Callable[[], object]:
    return {"deploy": lambda: client.deploy(bundles.mlp[3]),
            "rollback": lambda: client.rollback("mlp"),
            "activate": lambda: client.activate("mlp", 1),
            "reload": lambda: client.activate("mlp", 2, force=True)}[what]


def _check(agent: AgentProcess, client: AgentClient, bundles: Bundles,
           killed: tuple[str, str, str] | None) -> None:
    """Version 2 active and serving, 1 and 2 on disk, no leftovers; the last kill recorded."""
    state = agent.state_dir
    assert [v.version for v in client.models("mlp") if v.active] == [2]
    assert sorted(p.name for p in (state / "models" / "mlp").iterdir()) == ["1", "2"]
    incoming = state / "incoming"
    assert not incoming.exists() or not any(incoming.iterdir())
    version, probs = served_version(agent.grpc)
    assert version == "2"
    np.testing.assert_allclose(probs, bundles.reference(2, X), rtol=1e-4, atol=1e-5)
    if killed is not None:
        what, step, kind = killed
        latest = client.deployments("mlp", limit=1)[0]
        assert (latest.kind, latest.status, latest.last_step) == (kind, "interrupted",
                                                                  step), (what, step)
        assert latest.from_version == 2
        assert f"last step reached: {step}" in latest.reason


@pytest.mark.slow
def test_kill_9_at_each_step_of_rollback_activate_and_reload(bundles: Bundles,
                                                             tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as first:
        token = (state / "management.token").read_text().strip()
        with AgentClient(first.management, token=token) as client:
            assert client.deploy(bundles.mlp[1]).ok
            assert client.deploy(bundles.mlp[2]).ok
    assert integrity(state) == {"state.db": "ok", "metrics.db": "ok"}
    killed: tuple[str, str, str] | None = None
    for what, step, kind in CASES:
        agent = AgentProcess(state, trust=bundles.public_key, env={PAUSE_ENV: step})
        agent.start()
        try:
            with AgentClient(agent.management, token=token) as client:
                _check(agent, client, bundles, killed)
                errors: list[BaseException] = []
                call = _call(client, what, bundles)

                def change(call: Callable[[], object] = call, errors: list = errors) -> None:
                    try:
                        call()
                    except ManagementError as exc:  # the agent dies mid-call
                        errors.append(exc)

                caller = threading.Thread(target=change, daemon=True)
                caller.start()
                agent.wait_for_file(state / PAUSE_FILE)
                assert (state / PAUSE_FILE).read_text() == step
                agent.kill()
                caller.join(60)
                assert not caller.is_alive() and errors, f"{what} at {step} did not fail"
        finally:
            agent.kill()
        (state / PAUSE_FILE).unlink()
        assert integrity(state) == {"state.db": "ok", "metrics.db": "ok"}, (what, step)
        killed = (what, step, kind)
    with AgentProcess(state, trust=bundles.public_key) as last, \
            AgentClient(last.management, token=token) as client:
        _check(last, client, bundles, killed)
        # after all that, a rollback still runs to its end
        assert client.rollback("mlp").ok
        assert served_version(last.grpc)[0] == "1"
    assert integrity(state) == {"state.db": "ok", "metrics.db": "ok"}
