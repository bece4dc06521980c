"""The scripting subcommands read the config like the UI: ``agents`` browses the
``[discovery] interfaces`` of the config, and ``[tokens]`` keyed by an agent's name work for
``deploy --agent HOST:PORT`` (the name comes from the agent's GetInfo)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.console_cli.conftest import Fleet, console
from tests.support.bundles import Bundles


def _fleet_with_config(fleet: Fleet, tmp_path: Path, text: str) -> Fleet:
    """``fleet`` with a config home of its own (the pins copied, ``text`` as config.toml)."""
    home = tmp_path / "home"
    (home / "edge-console").mkdir(parents=True)
    shutil.copy(fleet.home / "edge-console" / "known_agents", home / "edge-console")
    (home / "edge-console" / "config.toml").write_text(text)
    return Fleet(fleet.a, fleet.b, fleet.token_a, fleet.token_b, home)


def test_agents_browses_the_config_interfaces(fleet: Fleet, tmp_path: Path) -> None:
    configured = _fleet_with_config(fleet, tmp_path, '[discovery]\ninterfaces = ["127.0.0.1"]\n')
    run = console(configured, "agents", "--json", "--timeout", "3")  # no --mdns-interface
    assert run.code == 0, run.err
    rows = {r["name"]: r for r in run.json()}
    assert rows["agent-a"]["source"] == "mdns"  # seen on the configured loopback interface
    # an address this machine does not have (TEST-NET-1): the config's choice is what is
    # browsed, and it fails with one line naming it, not a traceback
    elsewhere = _fleet_with_config(fleet, tmp_path / "x",
                                   '[discovery]\ninterfaces = ["192.0.2.123"]\n')
    run = console(elsewhere, "agents", "--json", "--timeout", "1")
    assert run.code == 1 and "Traceback" not in run.err and run.err.count("\n") == 1
    assert "192.0.2.123" in run.err and "--mdns-interface" in run.err
    ok = console(elsewhere, "agents", "--json", "--timeout", "3", "--mdns-interface",
                 "127.0.0.1")  # the command line still wins
    assert ok.code == 0 and "agent-a" in ok.out


def test_a_token_keyed_by_name_works_for_deploy_to_host_port(fleet: Fleet, bundles: Bundles,
                                                             tmp_path: Path) -> None:
    configured = _fleet_with_config(
        fleet, tmp_path, f'[tokens]\n"agent-a" = "{fleet.a.token}"\n'
        f'"agent-b" = "{fleet.b.token}"\n')
    run = console(configured, "deploy", str(bundles.mlp[1]), "--agent", fleet.b.management,
                  "--json")  # no --token-file: the token of agent-b, found by its name
    assert run.code == 0, run.err
    (report,) = run.json()
    assert report["result"]["ok"]
    status = console(configured, "status", "--agent", fleet.b.management, "--json").json()
    assert [v["version"] for v in status[0]["versions"] if v["active"]] == [1]


def test_a_name_keyed_token_of_another_agent_is_not_used(fleet: Fleet, tmp_path: Path) -> None:
    # the only named token is agent-a's: agent-b refuses it, and the error says token
    configured = _fleet_with_config(fleet, tmp_path, f'[tokens]\n"agent-a" = "{fleet.a.token}"\n')
    run = console(configured, "status", "--agent", fleet.b.management)
    assert run.code == 1 and "token" in run.err and run.err.count("\n") == 1


def test_the_agent_behind_an_address_is_remembered_so_no_token_is_guessed_again(
        fleet: Fleet, tmp_path: Path) -> None:
    from console.agent_names import AgentNames

    # agent-a's token is listed first: on first contact agent-b refuses it once
    configured = _fleet_with_config(
        fleet, tmp_path, f'[tokens]\n"agent-a" = "{fleet.a.token}"\n'
        f'"agent-b" = "{fleet.b.token}"\n')
    names = AgentNames(configured.home / "edge-console" / "agent_names")
    assert names.lookup(fleet.b.management) is None
    first = console(configured, "status", "--agent", fleet.b.management, "--json")
    assert first.code == 0, first.err
    seen = names.lookup(fleet.b.management)
    assert seen is not None and seen.name == "agent-b"
    # from now on agent-b's own token is chosen at once (no wrong token in the agent's log)
    again = console(configured, "status", "--agent", fleet.b.management, "--json")
    assert again.code == 0, again.err


def test_agent_names_file_keeps_one_line_per_address(tmp_path: Path) -> None:
    from console.agent_names import AgentNames

    names = AgentNames(tmp_path / "cfg" / "agent_names")
    names.remember("127.0.0.1:1", "a", "id-a")
    names.remember("127.0.0.1:2", "b", "id-b")
    names.remember("127.0.0.1:1", "c", "id-c")  # another agent now answers there
    names.remember("127.0.0.1:3", "bad name", "id")  # not recorded: it would not parse back
    lines = (tmp_path / "cfg" / "agent_names").read_text().splitlines()
    assert lines == ["127.0.0.1:2 b id-b", "127.0.0.1:1 c id-c"]
    seen = names.lookup("127.0.0.1:1")
    assert seen is not None and (seen.name, seen.agent_id) == ("c", "id-c")
    assert names.lookup("127.0.0.1:3") is None
    assert (tmp_path / "cfg" / "agent_names").stat().st_mode & 0o777 == 0o600
