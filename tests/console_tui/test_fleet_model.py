"""The fleet view model and the console config file (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.config import BrokerSettings, ConsoleSettings, StaticAgent, load_settings
from console.discovery import DiscoveredAgent, DiscoveryEvent
from console.errors import ConsoleConfigError
from console.fleet import AgentState, Fleet, ProbeResult, format_ago

NOW = 1_800_000_000.0


def _found(n: int, **kw: object) -> DiscoveredAgent:
    base: dict[str, object] = dict(
        id=f"id-{n}", name=f"agent-{n}", host=f"10.0.0.{n}", port=7000 + n, arch="x86_64",
        profile="x86_64-cpu-onnxruntime", api="1", grpc_port=8000 + n, txt={},
        addresses=(f"10.0.0.{n}",), last_seen=NOW)
    base.update(kw)
    return DiscoveredAgent(**base)  # type: ignore[arg-type]


def test_discovery_filter_sort_and_offline() -> None:
    fleet = Fleet(clock=lambda: NOW)
    changes: list[int] = []
    fleet.subscribe(lambda: changes.append(fleet.version))
    fleet.apply_discovery(DiscoveryEvent("added", _found(2, txt={"models": "mlp:2,bert:1"})))
    fleet.apply_discovery(DiscoveryEvent("added", _found(1, arch="aarch64",
                                                         profile="arm64-cpu-onnxruntime")))
    assert [a.name for a in fleet.view()] == ["agent-1", "agent-2"]
    assert [a.name for a in fleet.view(sort="name", reverse=True)] == ["agent-2", "agent-1"]
    assert [a.name for a in fleet.view("arm64")] == ["agent-1"]
    assert [a.name for a in fleet.view("bert x86")] == ["agent-2"]
    assert fleet.get("id-2") is not None and fleet.get("id-2").models == ("mlp:2", "bert:1")

    fleet.apply_discovery(DiscoveryEvent("removed", _found(2, last_seen=NOW + 5)))
    gone = fleet.get("id-2")
    # a goodbye is news from now (the console's clock), whatever the record's own time
    assert gone is not None and gone.state is AgentState.OFFLINE and gone.last_seen == NOW
    assert [a.name for a in fleet.view(sort="status")] == ["agent-1", "agent-2"]
    assert [a.name for a in fleet.view("offline")] == ["agent-2"]
    fleet.apply_discovery(DiscoveryEvent("added", _found(2)))
    assert fleet.get("id-2").state is AgentState.UNKNOWN  # back, not yet asked
    assert changes == [1, 2, 3, 4]
    assert [e.text for e in fleet.events][-2:] == ["went offline", "discovered at "
                                                   "10.0.0.2:7002 (x86_64-cpu-onnxruntime)"]


def test_api_mismatch_from_the_advert_and_probe_states() -> None:
    fleet = Fleet(clock=lambda: NOW)
    fleet.apply_discovery(DiscoveryEvent("added", _found(3, api="2")))
    agent = fleet.get("id-3")
    assert agent is not None and agent.state is AgentState.API_MISMATCH
    assert "v2" in agent.message and "upgrade" in agent.message
    fleet.apply_discovery(DiscoveryEvent("added", _found(7, api="")))
    assert fleet.get("id-7").state is AgentState.UNKNOWN  # no api in the advert: ask it
    fleet.apply_discovery(DiscoveryEvent("added", _found(4)))
    fleet.apply_probe("id-4", ProbeResult(AgentState.AUTH_FAILED, "refused the token"))
    assert fleet.get("id-4").state is AgentState.AUTH_FAILED
    fleet.apply_probe("id-4", ProbeResult(AgentState.ONLINE, models=("mlp:3",)))
    assert fleet.get("id-4").models == ("mlp:3",) and fleet.get("id-4").message == ""


def test_static_agent_merges_with_its_advert_and_goes_offline_when_silent() -> None:
    fleet = Fleet(clock=lambda: NOW)
    fleet.add_static([StaticAgent("10.0.0.5", 7005, "line-5")])
    assert fleet.get("10.0.0.5:7005").state is AgentState.UNKNOWN
    fleet.apply_probe("10.0.0.5:7005", ProbeResult(AgentState.UNREACHABLE, "no answer"))
    assert fleet.get("10.0.0.5:7005").state is AgentState.UNREACHABLE  # never seen
    fleet.apply_probe("10.0.0.5:7005", ProbeResult(AgentState.ONLINE, agent_id="id-5"))
    fleet.apply_probe("10.0.0.5:7005", ProbeResult(AgentState.UNREACHABLE, "no answer"))
    silent = fleet.get("10.0.0.5:7005")
    assert silent.state is AgentState.OFFLINE and silent.last_seen == NOW
    fleet.apply_discovery(DiscoveryEvent("added", _found(5)))
    assert len(fleet) == 1
    merged = fleet.get("10.0.0.5:7005")
    assert merged.source == "static+mdns" and merged.name == "line-5"


def test_format_ago() -> None:
    assert [format_ago(s) for s in (None, 0.5, 42, 300, 7200, 200000)] == [
        "-", "now", "42s ago", "5m ago", "2h ago", "2d ago"]


def test_config_file(tmp_path: Path) -> None:
    (tmp_path / "line3.token").write_text("tok-3\n")
    path = tmp_path / "config.toml"
    path.write_text("""
read_only = true
poll_interval_s = 5
[discovery]
interfaces = ["127.0.0.1"]
[[agents]]
address = "10.0.0.7:7070"
name = "line-3"
token_file = "line3.token"
[tokens]
"jetson-01" = "tok-j"
default = "tok-d"
""")
    s = load_settings(path)
    assert s.read_only and s.poll_interval_s == 5.0 and s.interfaces == ("127.0.0.1",)
    assert s.agents == (StaticAgent("10.0.0.7", 7070, "line-3", "tok-3"),)
    assert s.token_for(address="10.0.0.7:7070") == "tok-3"
    assert s.token_for(agent_id="x", name="jetson-01") == "tok-j"
    assert s.token_for(name="other") == "tok-d"
    s2 = s.with_overrides(agents=["127.0.0.1:9"], token="tok-cli")
    assert [a.address for a in s2.agents] == ["10.0.0.7:7070", "127.0.0.1:9"]
    assert s2.token_for(address="127.0.0.1:9") == "tok-cli"
    assert s.broker is None


def test_the_fleet_broker_table(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not read until it connects")
    path = tmp_path / "config.toml"
    path.write_text("[fleet]\nbroker = 'mqtts://broker:8883'\ngroup = 'cams'\nca = 'ca.pem'\n"
                    "username = 'console'\n")
    assert load_settings(path).broker == BrokerSettings(
        "mqtts://broker:8883", "cams", ca=tmp_path / "ca.pem", username="console")


@pytest.mark.parametrize(("text", "match"), [
    ("[[agents]]\naddress = 'nohost'\n", "HOST:PORT"),
    ("[discovery]\ninterfaces = ['eth0']\n", "IPv4"),
    ("colour = 'red'\n", "unknown key"),
    ("[[agents]]\naddress = '1.2.3.4:5'\ntoken_file = 'missing'\n", "cannot read token"),
    ("not toml =", "not valid TOML"),
    ("[fleet]\ngroup = 'cams'\n", "needs broker"),
    ("[fleet]\nbroker = 'mqtts://b'\nca = 'missing.pem'\n", "does not exist"),
    ("[fleet]\nbroker = 'mqtts://b'\ntopic = 'x'\n", "unknown key"),
])
def test_bad_config_files_say_what_to_fix(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConsoleConfigError, match=match):
        load_settings(path)


def test_missing_default_config_is_fine_but_a_named_one_is_not(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    # defaults, remembering things (the last bundle folder) beside where the config would be
    assert load_settings() == ConsoleSettings(state_dir=tmp_path / "edge-console")
    with pytest.raises(ConsoleConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_a_discovered_agent_that_stops_answering_goes_offline_and_comes_back() -> None:
    fleet = Fleet(clock=lambda: NOW)
    fleet.apply_discovery(DiscoveryEvent("added", _found(6)))
    fleet.apply_probe("id-6", ProbeResult(AgentState.UNREACHABLE, "refused"))
    assert fleet.get("id-6").state is AgentState.UNREACHABLE  # never answered: unreachable
    fleet.apply_probe("id-6", ProbeResult(AgentState.ONLINE))
    fleet.apply_probe("id-6", ProbeResult(AgentState.UNREACHABLE, "refused"))
    agent = fleet.get("id-6")
    assert agent.state is AgentState.OFFLINE and agent.message == "stopped answering: refused"
    fleet.apply_probe("id-6", ProbeResult(AgentState.ONLINE))
    assert fleet.get("id-6").state is AgentState.ONLINE
    fleet.apply_discovery(DiscoveryEvent("removed", _found(6)))
    fleet.apply_probe("id-6", ProbeResult(AgentState.ONLINE))  # a late answer after goodbye
    assert fleet.get("id-6").state is AgentState.OFFLINE and fleet.get("id-6").left
    fleet.apply_discovery(DiscoveryEvent("added", _found(6)))
    assert fleet.get("id-6").state is AgentState.UNKNOWN and not fleet.get("id-6").left
    texts = [e.text for e in fleet.events]
    assert texts.count("went offline (stopped answering)") == 1 and "answering again" in texts
