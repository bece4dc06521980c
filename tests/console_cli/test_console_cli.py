"""edge-console scripting subcommands end to end: subprocesses against real agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console_cli.conftest import Fleet, console
from tests.support.bundles import Bundles


def test_help_and_ui_without_a_terminal() -> None:
    top = console(None)  # no terminal: the help, and why the UI did not open
    assert top.code == 0 and "terminal UI needs a terminal" in top.out
    for sub in ("agents", "status", "deploy", "rollback"):
        run = console(None, sub, "--help")
        assert run.code == 0 and "--token-file" in run.out, sub
    ui = console(None, "ui")
    assert ui.code == 2 and "needs a terminal" in ui.err and "Traceback" not in ui.err
    ui_help = console(None, "ui", "--help")
    assert ui_help.code == 0 and "--read-only" in ui_help.out


def test_deploy_to_two_agents_canary_first(fleet: Fleet, bundles: Bundles) -> None:
    run = console(fleet, "deploy", str(bundles.mlp[1]), str(bundles.arm64),
                  "--agent", fleet.a.management, "--agent", fleet.b.management,
                  "--canary", fleet.b.management, "--token-file", fleet.token_a)
    # one token file for two agents: b refuses it, and as the canary it stops the rollout
    assert run.code == 1
    assert run.err.count("\n") == 1 and "canary" in run.err and "token" in run.err
    status_a = console(fleet, "status", "--agent", fleet.a.management, "--json",
                       "--token-file", fleet.token_a).json()
    assert status_a[0]["versions"] == []  # a was never touched

    for agent, token in ((fleet.a, fleet.token_a), (fleet.b, fleet.token_b)):
        run = console(fleet, "deploy", str(bundles.mlp[1]), "--agent", agent.management,
                      "--token-file", token, "--json")
        assert run.code == 0, run.err
        (report,) = run.json()
        assert report["result"]["ok"] and report["result"]["active_version"] == 1
        steps = [s["step"] for s in report["result"]["deployment"]["steps"]]
        assert steps[-1] == "committed" and "probed" in steps


def test_a_bundle_for_another_arch_is_refused_with_the_agent_profile(
        fleet: Fleet, bundles: Bundles) -> None:
    run = console(fleet, "deploy", str(bundles.arm64), "--agent", fleet.a.management,
                  "--token-file", fleet.token_a)
    assert run.code == 1
    assert "no bundle of mlp version 4 fits agent agent-a" in run.err
    assert run.err.count("\n") == 1


def test_failed_canary_leaves_the_rest_alone(fleet: Fleet, bundles: Bundles,
                                             tmp_path: Path) -> None:
    config = fleet.home / "edge-console" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[[agents]]\naddress = "{fleet.a.management}"\n'
                      f'token_file = "{fleet.token_a}"\n\n'
                      f'[[agents]]\naddress = "{fleet.b.management}"\n'
                      f'token_file = "{fleet.token_b}"\n')
    try:
        before_b = console(fleet, "status", "--agent", fleet.b.management, "--json").json()
        run = console(fleet, "deploy", str(bundles.nan), "--agent", fleet.a.management,
                      "--agent", fleet.b.management, "--canary", fleet.a.management)
        assert run.code == 1 and "canary" in run.err and "NaN" in run.err
        assert "probed    FAILED" in run.out
        after_b = console(fleet, "status", "--agent", fleet.b.management, "--json").json()
        assert after_b[0]["deployments"] == before_b[0]["deployments"]
    finally:
        config.unlink()


def test_rollback_and_status(fleet: Fleet, bundles: Bundles) -> None:
    up = console(fleet, "deploy", str(bundles.mlp[2]), "--agent", fleet.a.management,
                 "--token-file", fleet.token_a)
    assert up.code == 0, up.err
    assert "committed" in up.out
    back = console(fleet, "rollback", "mlp", "--agent", fleet.a.management, "--to-version",
                   "1", "--token-file", fleet.token_a)
    assert back.code == 0, back.err
    assert "version 1 is active" in back.out
    status = console(fleet, "status", "--agent", fleet.a.management, "--token-file",
                     fleet.token_a)
    assert status.code == 0 and "agent-a" in status.out and "rollback" in status.out
    data = console(fleet, "status", "--agent", fleet.a.management, "--json", "--token-file",
                   fleet.token_a).json()
    active = [v["version"] for v in data[0]["versions"] if v["active"]]
    assert active == [1]


def test_agents_lists_mdns_and_given_entries(fleet: Fleet) -> None:
    run = console(fleet, "agents", "--json", "--mdns-interface", "127.0.0.1", "--timeout", "3",
                  "--agent", fleet.b.management, "--token-file", fleet.token_b)
    assert run.code == 0, run.err
    # (an agent-a of an earlier module's fleet may still be in the mDNS answers for a moment:
    # this fleet's is the one on its management port)
    port = ":" + fleet.a.management.rpartition(":")[2]
    advertised = [r for r in run.json() if r["name"] == "agent-a" and r["source"] == "mdns"]
    assert any(r["address"].endswith(port) for r in advertised), advertised
    rows = {r["name"]: r for r in run.json()}
    assert rows["agent-b"]["source"] == "given" and rows["agent-b"]["reachable"]
    assert rows["agent-b"]["profile"].startswith("x86_64-")


@pytest.mark.parametrize("token", ["wrong", None])
def test_wrong_token_fails_with_one_line(fleet: Fleet, tmp_path: Path,
                                         token: str | None) -> None:
    args = ["status", "--agent", fleet.a.management]
    if token is not None:
        bad = tmp_path / "bad.token"
        bad.write_text(token)
        args += ["--token-file", str(bad)]
    run = console(fleet, *args)
    assert run.code == 1
    assert run.err.startswith("edge-console status: error:") and "token" in run.err
    assert run.err.count("\n") == 1


def test_unreachable_agent_fails_with_one_line(fleet: Fleet) -> None:
    run = console(fleet, "rollback", "mlp", "--agent", "127.0.0.1:1", "--token-file",
                  str(fleet.token_a))
    assert run.code == 1 and "127.0.0.1:1" in run.err and run.err.count("\n") == 1


def test_deploy_to_several_agents_then_again_is_a_no_op(fleet: Fleet, bundles: Bundles) -> None:
    config = fleet.home / "edge-console" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[[agents]]\naddress = "{fleet.a.management}"\n'
                      f'token_file = "{fleet.token_a}"\n\n'
                      f'[[agents]]\naddress = "{fleet.b.management}"\n'
                      f'token_file = "{fleet.token_b}"\n')
    try:
        args = ("deploy", str(bundles.mlp[3]), "--agent", fleet.a.management, "--agent",
                fleet.b.management, "--json")
        first = console(fleet, *args)
        assert first.code == 0, first.err
        assert [r["result"]["active_version"] for r in first.json()] == [3, 3]
        again = console(fleet, *args)
        assert again.code == 0, again.err
        assert all("already active" in r["skipped"] for r in again.json())
    finally:
        config.unlink()
