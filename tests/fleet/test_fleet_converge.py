"""The agent converges on the desired state fully (docs/fleet.md), through a real Mosquitto
and a real registry: a model the fleet put there is removed once a newer desired state no
longer names it (a model deployed on the device itself is never touched); a failed deploy is
tried again with a bounded backoff, its retry time in the status, without a new document; a
halted first rollout removes the model from the agents it reached."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.cli import main as edge_console
from console.fleet_broker import FleetBroker
from edge_agent.fleet import protocol as p
from packager.build import build_bundles
from tests.fleet.conftest import Fleet, fleet_agent
from tests.fleet.test_fleet import WAIT_S, _active, _agent_status
from tests.registry.registry_proc import BINARY as REGISTRY_BINARY
from tests.registry.registry_proc import SKIP_REASON as REGISTRY_SKIP
from tests.registry.registry_proc import running_registry
from tests.support.bundles import PROFILE, Bundles
from tests.support.harness import AgentProcess
from tests.support.mosquitto import Mosquitto

pytestmark = [pytest.mark.slow]

_REVISIONS = itertools.count(1)  # the agents' own documents: one growing revision


@pytest.fixture(scope="module")
def pair(bundles: Bundles, broker: Mosquitto,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Agents a (may pull from edge/ and bad/) and b (edge/ only) in a group of their own,
    trying a failed deploy again after 2 s, then 4 s, then every 8 s."""
    if REGISTRY_BINARY is None:
        pytest.skip(REGISTRY_SKIP)
    root = tmp_path_factory.mktemp("converge")
    group = f"c-{uuid.uuid4().hex[:8]}"
    retry = "retry_initial_s = 2\nretry_max_s = 8\n"
    with running_registry(root / "registry") as reg:
        edge, bad = f"{reg.address}/edge", f"{reg.address}/bad"
        ids = {k: f"{k}-{uuid.uuid4().hex[:6]}" for k in ("a", "b")}
        with fleet_agent(root / "a", bundles, broker, group, ids["a"], allow=[edge, bad],
                         insecure=[reg.address], fleet_lines=retry) as a, \
                fleet_agent(root / "b", bundles, broker, group, ids["b"], allow=[edge],
                            insecure=[reg.address], fleet_lines=retry) as b:
            yield Fleet(broker, reg, group, {"a": a, "b": b}, bundles)


@pytest.fixture
def console(pair: Fleet) -> Iterator[FleetBroker]:
    with pair.console() as c:
        assert c.wait_until(lambda: sum(a.online for a in c.group_agents(pair.group)) == 2,
                            WAIT_S), c.group_agents(pair.group)
        yield c


@pytest.fixture(scope="module")
def local_bundle(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model of another name, deployed on the device itself (never through the fleet)."""
    (bundle,) = build_bundles(bundles.sources[1], name="local", version=1, profiles=[PROFILE],
                              out_dir=tmp_path_factory.mktemp("local"),
                              key_path=bundles.private_key, dynamic_batch=True)
    return bundle


def _own(console: FleetBroker, pair: Fleet, agent: AgentProcess,
         models: dict[str, p.ModelTarget]) -> int:
    """Publish ``agent``'s own desired state; its revision."""
    revision = next(_REVISIONS)
    console.publish(p.Desired(pair.group, revision, models, agent=agent.name), pair.key)
    return revision


def _clear_own(console: FleetBroker, agent: AgentProcess) -> None:
    console.client.publish(p.agent_desired_topic(agent.name), b"", qos=1,
                           retain=True).wait_for_publish(10)


def _model(console: FleetBroker, pair: Fleet, agent: AgentProcess) -> dict[str, object]:
    models = _agent_status(console, pair.group, agent.name).get("models") or {}
    assert isinstance(models, dict)
    return dict(models.get("mlp") or {})


def _on_disk(agent: AgentProcess) -> dict[str, list[int]]:
    with agent.client() as c:
        out: dict[str, list[int]] = {}
        for v in c.models():
            out.setdefault(v.model, []).append(v.version)
        return out


def test_a_model_the_fleet_put_there_is_removed_when_no_longer_desired(
        pair: Fleet, console: FleetBroker, local_bundle: Path) -> None:
    a = pair.agents["a"]
    with a.client() as c:
        assert c.deploy(local_bundle).ok  # deployed on the device: not the fleet's
    v1 = pair.push(pair.bundles.mlp[1], "edge/mlp:1")
    try:
        _own(console, pair, a, {"mlp": p.ModelTarget(v1)})
        assert console.wait_until(lambda: _model(console, pair, a).get("state") == "ok",
                                  WAIT_S), _model(console, pair, a)
        assert _active(a) == 1
        revision = _own(console, pair, a, {})  # a newer desired state without mlp
        assert console.wait_until(lambda: _agent_status(console, pair.group, a.name).get(
            "agent_revision") == revision and not _model(console, pair, a), WAIT_S)
        assert console.wait_until(lambda: "mlp" not in _on_disk(a), WAIT_S), _on_disk(a)
        assert _on_disk(a)["local"] == [1] and _active(a, "local") == 1  # untouched
        with a.client() as c:
            kinds = [d.kind for d in c.deployments("mlp")]
        assert kinds[0].lower() == "remove", kinds
    finally:
        _clear_own(console, a)


def test_a_failed_deploy_is_tried_again_with_backoff_until_it_succeeds(
        pair: Fleet, console: FleetBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    a = pair.agents["a"]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1760000000")  # the same digest in every repo
    digest = pair.push(pair.bundles.mlp[2], "edge/mlp:2").split("@", 1)[1]
    late = f"oci://{pair.registry.address}/edge/late@{digest}"  # not pushed there yet
    try:
        revision = _own(console, pair, a, {"mlp": p.ModelTarget(late)})
        assert console.wait_until(lambda: int(str(_model(console, pair, a).get("attempts")
                                                  or 0)) >= 2, WAIT_S), _model(console, pair, a)
        failed = _model(console, pair, a)
        assert failed["state"] == "failed" and failed["ref"] == late and failed["error"]
        assert isinstance(failed["retry_at"], float)
        assert pair.push(pair.bundles.mlp[2], "edge/late:2") == late  # now it is there
        assert console.wait_until(lambda: _model(console, pair, a).get("state") == "ok",
                                  WAIT_S), _model(console, pair, a)
        ok = _model(console, pair, a)
        assert ok["version"] == 2 and "retry_at" not in ok and "error" not in ok
        assert _agent_status(console, pair.group, a.name)["agent_revision"] == revision
        assert _active(a) == 2
    finally:
        _clear_own(console, a)
    # the agent's own document cleared, the group's names nothing: the fleet's mlp goes
    assert console.wait_until(lambda: "mlp" not in _on_disk(a), WAIT_S), _on_disk(a)


def test_a_halted_first_rollout_removes_the_model_from_the_agents_it_reached(
        pair: Fleet, console: FleetBroker, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = pair.agents["a"], pair.agents["b"]
    v3 = pair.push(pair.bundles.mlp[3], "bad/mlp:3")  # b may not pull from bad/
    assert console.current(pair.group) is None  # the group's first rollout
    assert console.wait_until(lambda: "mlp" not in _on_disk(a), WAIT_S), _on_disk(a)
    capsys.readouterr()
    code = edge_console(["fleet", "deploy", "--broker", pair.broker.url, "--group",
                         pair.group, "--key", str(pair.bundles.private_key), f"mlp={v3}",
                         "--waves", "100%", "--soak", "1", "--max-failed", "0",
                         "--timeout", str(WAIT_S), "--json"])
    assert code == 1
    result = json.loads(capsys.readouterr().out)
    assert result["halted"] and list(result["waves"][0]["failed"]) == [b.name]
    assert sorted(result["restored"]) == sorted([a.name, b.name])
    assert not result["not_restored"]
    with a.client() as c:  # a had deployed version 3 and removed it on the halt
        assert any(d.to_version == 3 for d in c.deployments("mlp"))
    assert "mlp" not in _on_disk(a) and "mlp" not in _on_disk(b)
    assert _on_disk(a).get("local") == [1]  # deployed on the device: stays
