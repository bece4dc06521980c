"""Live settings bounded by the device (issue 27): a change asking for more threads or
instances than the device can run is refused at validation, in agent.toml and live alike, and a
SIGTERM while a change is in progress still stops the agent promptly."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from edge_agent.client.agent_client import ManagementError
from edge_agent.config.device_bounds import INSTANCES_PER_CORE, usable_cores
from edge_agent.deploy.pause import PAUSE_ENV, PAUSE_FILE
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess


def test_settings_beyond_the_device_are_refused_live(bundles: Bundles, tmp_path: Path) -> None:
    cores = usable_cores()
    with AgentProcess(tmp_path / "state", trust=bundles.public_key) as agent, \
            agent.client() as client:
        assert client.deploy(bundles.mlp[1]).ok
        before = {s.key: s.value for s in client.model_settings("mlp")}
        count = len(client.deployments("mlp"))
        too_many = INSTANCES_PER_CORE * cores + 1
        for values, words in (
                ({"threads": "100000"}, f"{cores} usable cores"),
                ({"instances": "10000"}, f"{INSTANCES_PER_CORE} per usable core"),
                ({"instances": str(too_many)}, f"{too_many} is more than"),
                ({"instances": str(INSTANCES_PER_CORE * cores), "threads": str(cores)},
                 "runtime threads"),
                ({"max_queue_size": "1000000000"}, "65,536"),
                ({"execution_timeout_ms": str(10**12)}, "1 hour")):
            with pytest.raises(ManagementError) as err:
                client.set_model_settings("mlp", values)
            assert err.value.status == "INVALID_ARGUMENT", values
            assert words in str(err.value) and "setting 'models.mlp." in str(err.value), \
                str(err.value)
        assert {s.key: s.value for s in client.model_settings("mlp")} == before
        assert len(client.deployments("mlp")) == count  # nothing was even recorded
        # the bound is the device's: the largest allowed value is accepted
        assert client.set_model_settings("mlp", {"threads": str(cores)}).ok


def test_agent_toml_beyond_the_device_is_refused_at_start(bundles: Bundles,
                                                          tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[models.mlp]\nthreads = 100000\n')
    agent = AgentProcess(tmp_path / "state", trust=bundles.public_key,
                         extra=["--no-mdns", "--config", str(config)])
    with pytest.raises(AssertionError) as err:
        agent.start()
    agent.kill()
    assert "models.mlp.threads" in str(err.value) and "usable cores" in str(err.value)


def test_sigterm_during_a_settings_change_stops_the_agent(bundles: Bundles,
                                                          tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as first, first.client() as client:
        assert client.deploy(bundles.mlp[1]).ok
    agent = AgentProcess(state, trust=bundles.public_key, env={PAUSE_ENV: "warmed"}).start()
    try:
        def change() -> None:
            with agent.client() as c, pytest.raises(ManagementError):
                c.set_model_settings("mlp", {"instances": "2"})  # held at "warmed"

        caller = threading.Thread(target=change, daemon=True)
        caller.start()
        agent.wait_for_file(state / PAUSE_FILE)
        t0 = time.monotonic()
        code = agent.stop(timeout=120)
        took = time.monotonic() - t0
        caller.join(60)
    finally:
        agent.kill()
    (state / PAUSE_FILE).unlink()
    print(f"SIGTERM during a settings change: exited {code} after {took:.1f} s")
    assert code in (0, 1), f"the agent ignored SIGTERM and was killed ({code})"
    with AgentProcess(state, trust=bundles.public_key) as again, again.client() as client:
        latest = client.deployments("mlp", limit=1)[0]
        assert (latest.kind, latest.status) == ("settings", "interrupted")
    assert os.path.isdir(state)
