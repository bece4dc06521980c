"""``edge-console doctor`` and ``edge-console logs`` against real agents over TLS, and the
parity figures ``status`` reads from the agent."""

from __future__ import annotations

import json
import logging
import time

from tests.console_cli.conftest import Fleet, console
from tests.support.bundles import Bundles


def test_doctor_prints_each_agents_findings(fleet: Fleet) -> None:
    run = console(fleet, "doctor", "--agent", fleet.a.management, "--token-file", fleet.token_a)
    assert run.code in (0, 1), run.err
    assert "agent-a" in run.out and "architecture" in run.out and "onnxruntime" in run.out
    data = json.loads(console(fleet, "doctor", "--agent", fleet.a.management, "--json",
                              "--token-file", fleet.token_a).out)
    assert data[0]["name"] == "agent-a"
    checks = {(f["area"], f["check"]): f["status"] for f in data[0]["findings"]}
    assert checks[("device", "architecture")] == "ok"
    assert data[0]["ok"] == all(f["status"] != "fail" for f in data[0]["findings"])


def test_logs_prints_the_agents_recent_lines(fleet: Fleet) -> None:
    marker = f"console-logs-marker-{time.time_ns()}"
    # the in-process agents share this process's root logger, so this line is in their ring
    logging.getLogger("edge_agent.test").error("%s", marker)
    run = console(fleet, "logs", "--agent", fleet.a.management, "--token-file", fleet.token_a,
                  "--level", "error")
    assert run.code == 0, run.err
    assert marker in run.out and "ERROR" in run.out
    as_json = console(fleet, "logs", "--agent", fleet.a.management, "--token-file",
                      fleet.token_a, "--json", "--tail", "5")
    lines = as_json.json()  # one JSON document: a list of the lines
    assert 0 < len(lines) <= 5 and all({"seq", "level", "message"} <= set(x) for x in lines)


def test_logs_refuses_a_bad_level_in_one_line(fleet: Fleet) -> None:
    run = console(fleet, "logs", "--agent", fleet.a.management, "--token-file", fleet.token_a,
                  "--level", "loud")
    assert run.code == 1
    assert run.err.count("\n") == 1 and "unknown log level 'loud'" in run.err


def test_status_shows_the_parity_figures_the_agent_keeps(fleet: Fleet, bundles: Bundles) -> None:
    up = console(fleet, "deploy", str(bundles.mlp[1]), "--agent", fleet.b.management,
                 "--token-file", fleet.token_b)
    assert up.code == 0, up.err
    data = console(fleet, "status", "--agent", fleet.b.management, "--json", "--token-file",
                   fleet.token_b).json()
    version = next(v for v in data[0]["versions"] if v["version"] == 1)
    assert version["parity"][0] is True and "top-1 agreement" in version["parity"][1]
    parity = {(p["model"], p["version"]): p for p in data[0]["parity"]}
    assert parity[("mlp", 1)]["figures"].startswith("ok: abs ")
