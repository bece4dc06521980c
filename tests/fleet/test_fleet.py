"""Fleets through a real Mosquitto on loopback (docs/fleet.md): agents converge on a signed
desired state pulled from a real registry; unsigned, wrong-key and replayed documents are
refused; the last will marks an agent offline; a failing wave halts and restores; an agent
without any management port is deployed and rolled back through the broker alone."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from console.cli import main as edge_console
from console.fleet_broker import AgentView, FleetBroker
from console.fleet_rollout import FailureBudget, Rollout, parse_waves
from edge_agent.fleet import protocol as p
from tests.fleet.conftest import Fleet, fleet_agent
from tests.support.bundles import Bundles
from tests.support.mosquitto import Mosquitto

pytestmark = [pytest.mark.slow]

WAIT_S = 180.0


@pytest.fixture
def console(fleet: Fleet) -> Iterator[FleetBroker]:
    with fleet.console() as c:
        c.current(fleet.group)
        yield c


def _view(console: FleetBroker, group: str, agent_id: str) -> AgentView | None:
    return next((a for a in console.group_agents(group) if a.agent_id == agent_id), None)


def _versions(console: FleetBroker, fleet: Fleet) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, agent in fleet.agents.items():
        view = next((a for a in console.group_agents(fleet.group)
                     if a.agent_id == agent.name), None)
        models = ((view.status or {}).get("models") or {}) if view else {}
        out[key] = (models.get("mlp") or {}).get("version")
    return out


def _wait_versions(console: FleetBroker, fleet: Fleet, want: dict[str, int]) -> None:
    ok = console.wait_until(lambda: all(_versions(console, fleet)[k] == v
                                        for k, v in want.items()), WAIT_S)
    assert ok, f"versions {_versions(console, fleet)}, wanted {want}"


def _active(agent, model: str = "mlp") -> int | None:  # type: ignore[no-untyped-def]
    with agent.client() as c:
        return next((v.version for v in c.models(model) if v.active and v.state == "READY"),
                    None)


def _publish_all(fleet: Fleet, console: FleetBroker, ref: str) -> int:
    current = console.current(fleet.group)
    revision = (current.revision if current else 0) + 1
    console.publish(p.Desired(fleet.group, revision, {"mlp": p.ModelTarget(ref)}), fleet.key)
    return revision


def _agent_status(console: FleetBroker, group: str, agent_id: str) -> dict[str, object]:
    view = _view(console, group, agent_id)
    return (view.status or {}) if view else {}


def test_agents_converge_on_a_signed_desired_state(fleet: Fleet, console: FleetBroker) -> None:
    v1 = fleet.push(fleet.bundles.mlp[1], "edge/mlp:1")
    fleet.refs["v1"] = v1
    assert console.wait_until(lambda: sum(a.online for a in console.group_agents(fleet.group))
                              == 3, WAIT_S), console.group_agents(fleet.group)
    revision = _publish_all(fleet, console, v1)
    _wait_versions(console, fleet, {"a": 1, "b": 1, "nat": 1})
    assert _active(fleet.agents["a"]) == _active(fleet.agents["b"]) == 1
    for view in console.group_agents(fleet.group):
        assert view.revision == revision and view.model_state("mlp", v1) == "ok"
        assert view.presence["profile"]  # what the agent says of itself on connect
    with fleet.agents["a"].client() as c:
        (dep,) = [d for d in c.deployments("mlp") if d.to_version == 1]
    received = next(s for s in dep.steps if s.step == "received")
    assert "@sha256:" in received.message  # the deploy-by-reference path, pinned


def _refusal(console: FleetBroker, group: str, agent_id: str, reason: str
             ) -> dict[str, object]:
    def refused() -> dict[str, object] | None:
        got = _agent_status(console, group, agent_id).get("refused") or {}
        assert isinstance(got, dict)
        return got if got.get("reason") == reason else None

    assert console.wait_until(lambda: refused() is not None, WAIT_S), reason
    found = refused()
    assert found is not None
    return found


@pytest.mark.parametrize("case", ["unsigned", "untrusted-key", "stale-revision"])
def test_unsigned_wrong_key_and_replayed_states_are_refused(
        fleet: Fleet, console: FleetBroker, case: str) -> None:
    agent = fleet.agents["a"]
    topic = p.agent_desired_topic(agent.name)
    v2 = fleet.push(fleet.bundles.mlp[2], "edge/mlp:2")
    doc = p.Desired(fleet.group, 1000, {"mlp": p.ModelTarget(v2)}, agent=agent.name)
    if case == "unsigned":
        payload = json.dumps({"document": doc.to_json()}).encode()
    elif case == "untrusted-key":
        payload = p.sign_desired(doc, Ed25519PrivateKey.generate())
    else:  # a valid document, then an older one replayed
        accepted = p.Desired(fleet.group, 5000, {"mlp": p.ModelTarget(fleet.refs["v1"])},
                             agent=agent.name)
        console.publish(accepted, fleet.key)
        assert console.wait_until(lambda: _agent_status(console, fleet.group, agent.name)
                                  .get("agent_revision") == 5000, WAIT_S)
        payload = p.sign_desired(p.Desired(fleet.group, 4999, {"mlp": p.ModelTarget(v2)},
                                           agent=agent.name), fleet.key)
    try:
        info = console.client.publish(topic, payload, qos=1, retain=True)
        info.wait_for_publish(10)
        refusal = _refusal(console, fleet.group, agent.name, case)
        assert refusal["scope"] == "agent" and refusal["message"]
        assert _active(agent) == 1  # nothing changed
    finally:
        console.client.publish(topic, b"", qos=1, retain=True).wait_for_publish(10)


def test_an_agents_own_state_applies_live_settings(fleet: Fleet, console: FleetBroker) -> None:
    agent = fleet.agents["b"]
    topic = p.agent_desired_topic(agent.name)
    target = p.ModelTarget(fleet.refs["v1"], {"max_queue_delay_us": 500})
    console.publish(p.Desired(fleet.group, 1, {"mlp": target}, agent=agent.name), fleet.key)
    try:
        def live() -> str | None:
            with agent.client() as c:
                return next((s.value for s in c.model_settings("mlp")
                             if s.key == "max_queue_delay_us" and s.source == "live"), None)

        assert console.wait_until(lambda: live() == "500", WAIT_S), live()
        assert _agent_status(console, fleet.group, agent.name)["agent_revision"] == 1
    finally:
        console.client.publish(topic, b"", qos=1, retain=True).wait_for_publish(10)


def test_rollout_in_waves_then_rollback_reaches_the_agent_behind_nat(
        fleet: Fleet, console: FleetBroker) -> None:
    v2 = fleet.push(fleet.bundles.mlp[2], "edge/mlp:2")
    result = Rollout(console, fleet.group, fleet.key, converge_timeout_s=WAIT_S).run(
        {"mlp": p.ModelTarget(v2)}, parse_waves("1,50%,100%"), 1.0, FailureBudget.parse("0"))
    assert not result.halted, result
    assert [len(w.members) for w in result.waves][-1] == 3
    _wait_versions(console, fleet, {"a": 2, "b": 2, "nat": 2})
    assert fleet.agents["nat"].management == ""  # no management port: the broker alone
    code = edge_console(["fleet", "rollback", "--broker", fleet.broker.url, "--group",
                         fleet.group, "--key", str(fleet.bundles.private_key)])
    assert code == 0
    _wait_versions(console, fleet, {"a": 1, "b": 1, "nat": 1})
    assert _active(fleet.agents["a"]) == 1


def test_a_change_on_the_device_is_reported_not_fought(fleet: Fleet,
                                                       console: FleetBroker) -> None:
    agent = fleet.agents["a"]
    _wait_versions(console, fleet, {"a": 1})
    with agent.client() as c:  # an operator (or the device's automatic rollback) changes it
        assert c.activate("mlp", 2).ok

    def metrics() -> int:
        view = _view(console, fleet.group, agent.name)
        return 0 if view is None or view.metrics is None else int(view.metrics["at"])

    try:
        assert console.wait_until(lambda: "no longer active" in json.dumps(
            _agent_status(console, fleet.group, agent.name)), WAIT_S)
        seen = metrics()  # two more wakes of the agent's fleet link (every 5 s here) ...
        assert console.wait_until(lambda: metrics() > seen, WAIT_S)
        seen = metrics()
        assert console.wait_until(lambda: metrics() > seen, WAIT_S)
        assert _active(agent) == 2  # ... and it did not switch back to the desired version
    finally:
        with agent.client() as c:
            c.activate("mlp", 1)
    _wait_versions(console, fleet, {"a": 1})
    assert console.wait_until(lambda: _view(console, fleet.group, agent.name) is not None
                              and _view(console, fleet.group, agent.name).state == "ok",
                              WAIT_S)


def test_a_failing_wave_halts_and_restores_the_changed_agents(
        fleet: Fleet, console: FleetBroker, capsys: pytest.CaptureFixture[str]) -> None:
    # b may not pull from bad/: the one wave of all three fails there, a and nat changed
    v3 = fleet.push(fleet.bundles.mlp[3], "bad/mlp:3")
    _wait_versions(console, fleet, {"a": 1, "b": 1, "nat": 1})
    capsys.readouterr()  # edge-pack push's own lines
    code = edge_console(["fleet", "deploy", "--broker", fleet.broker.url, "--group",
                         fleet.group, "--key", str(fleet.bundles.private_key), f"mlp={v3}",
                         "--waves", "100%", "--soak", "1", "--max-failed", "0",
                         "--timeout", str(WAIT_S), "--json"])
    assert code == 1  # halted
    result = json.loads(capsys.readouterr().out)
    a, b, nat = (fleet.agents[k].name for k in ("a", "b", "nat"))
    assert result["halted"] and len(result["waves"]) == 1
    assert list(result["waves"][0]["failed"]) == [b]
    assert "[registry] allow" in result["waves"][0]["failed"][b]  # b's report says why
    assert set(result["restored"]) >= {a, nat} and not result["not_restored"]
    _wait_versions(console, fleet, {"a": 1, "b": 1, "nat": 1})
    with fleet.agents["a"].client() as c:  # a had changed to 3 and is back on 1
        assert any(d.to_version == 3 for d in c.deployments("mlp"))
    assert _active(fleet.agents["a"]) == 1
    current = console.current(fleet.group)
    assert current is not None and current.percent == 0.0  # everyone on the previous state


def test_the_last_will_marks_a_vanished_agent_offline(
        fleet: Fleet, broker: Mosquitto, bundles: Bundles, console: FleetBroker,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    name = f"gone-{uuid.uuid4().hex[:6]}"
    agent = fleet_agent(tmp_path_factory.mktemp("gone") / "x", bundles, broker, fleet.group,
                        name, allow=[], insecure=[], keepalive_s=5).start()
    try:
        assert console.wait_until(lambda: (v := _view(console, fleet.group, name)) is not None
                                  and v.online, WAIT_S)
        assert agent.proc is not None
        os.killpg(agent.proc.pid, signal.SIGKILL)  # no DISCONNECT: the broker's will speaks
        agent.proc.wait(30)
        assert console.wait_until(lambda: (v := _view(console, fleet.group, name)) is not None
                                  and not v.online, WAIT_S)
    finally:
        agent.stop()
