"""Live settings (issue 13) on real agent processes serving a real model: changed under load
with no failed request, served (KServe ModelConfig shows them), recorded in the history,
kept across a restart, a failing change keeps the old settings serving, and a kill -9 during
a change leaves the old settings in force, like a deploy."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_agent.client.agent_client import AgentClient, ManagementError
from edge_agent.deploy.pause import PAUSE_ENV, PAUSE_FILE
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import AgentProcess
from tests.support.traffic import X, integrity, served_version


class Load:
    """Four tritonclient callers of ``mlp`` that must never fail and must get mlp's answers."""

    def __init__(self, address: str, reference: np.ndarray) -> None:
        self.address = address
        self.reference = reference
        self.ok = 0
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(4)]

    def _run(self) -> None:
        import tritonclient.grpc as tc

        with tc.InferenceServerClient(self.address) as client:
            while not self._stop.is_set():
                inp = tc.InferInput("input", [2, 64], "FP32")
                inp.set_data_from_numpy(X)
                try:
                    out = client.infer("mlp", [inp]).as_numpy("probs")
                except Exception as exc:  # any failure is a finding
                    with self._lock:
                        self.problems.append(f"request failed: {exc}")
                    continue
                with self._lock:
                    if not np.allclose(out, self.reference, rtol=1e-4, atol=1e-5):
                        self.problems.append("answer differs from mlp version 1")
                    self.ok += 1

    def more(self, timeout: float = 60.0) -> None:
        """Wait until callers get answers after this call (they keep running throughout)."""
        with self._lock:
            mark = self.ok

        def answered() -> bool:
            with self._lock:
                return self.ok > mark + 4 or bool(self.problems)

        eventually(answered, timeout=timeout, interval=0.02, message="no answers under load")

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


def _settings(client: AgentClient) -> dict[str, tuple[str, str]]:
    return {s.key: (s.value, s.source) for s in client.model_settings("mlp")}


def _served_config(address: str) -> Any:
    import tritonclient.grpc as tc

    with tc.InferenceServerClient(address) as triton:
        return triton.get_model_config("mlp").config


@pytest.fixture
def agent(bundles: Bundles, tmp_path: Path) -> Iterator[AgentProcess]:
    with AgentProcess(tmp_path / "state", trust=bundles.public_key) as running:
        with running.client() as client:
            assert client.deploy(bundles.mlp[1]).ok
        yield running


def test_settings_change_under_load_fails_no_request_and_survives_restart(
        agent: AgentProcess, bundles: Bundles) -> None:
    reference = bundles.reference(1, X)
    with agent.client() as client, Load(agent.grpc, reference) as load:
        load.more()
        first = client.set_model_settings("mlp", {"instances": "2",
                                                  "preferred_batch_sizes": "[2, 4]",
                                                  "max_queue_delay_us": "300"})
        assert first.ok, first.message
        assert "instances = 2" in first.message
        load.more()
        second = client.set_model_settings("mlp", {"max_queue_delay_us": "800",
                                                   "isolation": "thread"})
        assert second.ok, second.message
        load.more()
        # the new settings cannot load here (no GPU runtime): the old ones keep serving
        failed = client.set_model_settings("mlp", {"device": "cuda"})
        assert not failed.ok and "cuda" in failed.message.lower()
        load.more()
        assert load.problems == []
    assert load.ok > 0
    config = _served_config(agent.grpc)
    assert config.instance_group[0].count == 2
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 800
    with agent.client() as client:
        seen = _settings(client)
        assert seen["instances"] == ("2", "live")
        assert seen["device"] == ("", "default")
        history = client.deployments("mlp", limit=3)
        assert [(d.kind, d.status) for d in history] == [
            ("settings", "failed"), ("settings", "committed"), ("settings", "committed")]
        assert [v.version for v in client.models("mlp") if v.active] == [1]
    agent.stop()
    agent.start()
    with agent.client() as client:
        assert _settings(client)["max_queue_delay_us"] == ("800", "live")
        config = _served_config(agent.grpc)
        assert config.instance_group[0].count == 2
        assert config.dynamic_batching.max_queue_delay_microseconds == 800
        # revert: back to the settings before the last change, recorded as another change
        back = client.set_model_settings("mlp", revert=True)
        assert back.ok, back.message
        assert _settings(client)["max_queue_delay_us"] == ("300", "live")
        assert "isolation" not in {k for k, (_, src) in _settings(client).items()
                                   if src == "live"}
    np.testing.assert_allclose(served_version(agent.grpc)[1], reference, rtol=1e-4, atol=1e-5)


def test_bad_settings_are_refused_and_change_nothing(agent: AgentProcess) -> None:
    with agent.client() as client:
        before = _settings(client)
        count = len(client.deployments("mlp"))
        for values, words in (({"instancez": "2"}, "unknown"),
                              ({"instances": "0"}, ">= 1"),
                              ({"isolation": "sideways"}, "isolation"),
                              ({"max_queue_delay_us": "-5"}, ">= 0"),
                              ({"default_version": "1"}, "activate")):
            with pytest.raises(ManagementError) as err:
                client.set_model_settings("mlp", values)
            assert err.value.status == "INVALID_ARGUMENT" and words in str(err.value), values
        with pytest.raises(ManagementError) as missing:
            client.set_model_settings("nosuchmodel", {"instances": "2"})
        assert missing.value.status == "NOT_FOUND"
        assert _settings(client) == before
        assert len(client.deployments("mlp")) == count


@pytest.mark.parametrize("step", ["warmed", "switched"])
def test_kill_9_during_a_settings_change_keeps_the_old_settings(
        bundles: Bundles, tmp_path: Path, step: str) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as first, first.client() as client:
        assert client.deploy(bundles.mlp[1]).ok
        assert client.set_model_settings("mlp", {"instances": "2"}).ok
    agent = AgentProcess(state, trust=bundles.public_key, env={PAUSE_ENV: step}).start()
    try:
        errors: list[BaseException] = []

        def change() -> None:
            with agent.client() as c:
                try:
                    c.set_model_settings("mlp", {"instances": "3"})
                except ManagementError as exc:  # the agent dies mid-call
                    errors.append(exc)

        caller = threading.Thread(target=change, daemon=True)
        caller.start()
        agent.wait_for_file(state / PAUSE_FILE)
        agent.kill()
        caller.join(60)
        assert not caller.is_alive() and errors
    finally:
        agent.kill()
    (state / PAUSE_FILE).unlink()
    assert integrity(state) == {"state.db": "ok", "metrics.db": "ok"}
    with AgentProcess(state, trust=bundles.public_key) as again, again.client() as client:
        assert _settings(client)["instances"] == ("2", "live")
        assert _served_config(again.grpc).instance_group[0].count == 2
        latest = client.deployments("mlp", limit=1)[0]
        assert (latest.kind, latest.status, latest.last_step) == ("settings", "interrupted",
                                                                  step)
        np.testing.assert_allclose(served_version(again.grpc)[1], bundles.reference(1, X),
                                   rtol=1e-4, atol=1e-5)
        # and the next change runs to its end
        assert client.set_model_settings("mlp", {"instances": "3"}).ok
        assert _served_config(again.grpc).instance_group[0].count == 3
    assert Counter(d.name for d in (state / "models" / "mlp").iterdir()) == Counter(["1"])


def test_stored_settings_are_laid_over_agent_toml_at_start_and_a_stale_key_is_noted(
        bundles: Bundles, tmp_path: Path) -> None:
    from edge_agent.config.models import ModelOverrides
    from edge_agent.core.dataplane import DataPlane
    from edge_agent.deploy.manager import ManagerSettings, ModelManager
    from edge_agent.state import DeploymentKind, StateStore

    state = tmp_path / "state"
    settings = ManagerSettings(trusted_keys=(bundles.public_key,), watch_window_s=0.0)

    def manager() -> tuple[ModelManager, DataPlane, StateStore]:
        plane = DataPlane(state, autoload=False,
                          overrides={"mlp": ModelOverrides(max_queue_delay_us=700,
                                                           isolation="thread")})
        store = StateStore.open(state)
        return ModelManager(plane, store, settings), plane, store

    m, plane, store = manager()
    try:
        m.start()
        assert m.deploy(bundles.mlp[1]).ok
        assert m.change_settings("mlp", {"instances": 1}).ok
        # what an older agent may have stored: a key this one does not know
        dep = store.begin_deployment("mlp", DeploymentKind.SETTINGS, to_version=1,
                                     from_version=1)
        store.record_settings_change(dep, '{"instances": 1}', '{"instances": 1, "warp": 9}')
        store.commit_deployment(dep)
    finally:
        m.close(), plane.close(), store.close()
    m, plane, store = manager()
    try:
        notes = m.start()
        assert any("not applied" in n and "warp" in n for n in notes), notes
        batching = plane.repository.resolve("mlp").batching
        assert batching is not None and batching.instances == 1  # the other key applies
        assert m.change_settings("mlp", {"instances": 2}, unset=["warp"]).ok
        view = {v.key: (v.value, v.source) for v in m.model_settings("mlp")}
        assert view["instances"] == ("2", "live")
        assert view["max_queue_delay_us"] == ("700", "agent.toml")
        batching = plane.repository.resolve("mlp").batching
        assert batching is not None and batching.max_queue_delay_us == 700
        assert batching.instances == 2
    finally:
        m.close(), plane.close(), store.close()
