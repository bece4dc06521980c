"""Messages a new user hits (issue 17): each reproduced against real agents and real commands.

The inference port named as such; a path printed once; tables never cut when piped (and
``--json`` on every table command); rejected requests counted as failed; one name per state;
one spelling of the mDNS flags on every command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from console.cli import build_parser
from console.config import ConsoleSettings
from console.connections import Connections
from console.fleet import AgentState, FleetAgent
from console.tui import build_tui_parser
from edge_agent.client.agent_client import AgentClient, InferencePortError
from tests.console_cli.conftest import ROOT, Fleet, console
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import InProcessAgent, trusted_agent


def _piped(*args: str, module: str = "console.cli") -> subprocess.CompletedProcess[str]:
    """A command with stdout piped and no COLUMNS (what `... | grep` or a CI log sees)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def served(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[InProcessAgent]:
    """An agent on mlp version 2 (version 1 on disk, not loaded), after a failed deploy."""
    root = tmp_path_factory.mktemp("messages")
    with trusted_agent(root / "state", bundles.public_key, deploy=bundles.mlp[1]) as running:
        with AgentClient(running.management, token=running.token) as client:
            assert client.deploy(bundles.mlp[2]).ok
            assert not client.deploy(bundles.nan).ok  # a long reason in the history
        yield running


def test_the_inference_port_is_named_instead_of_method_not_found(fleet: Fleet) -> None:
    run = console(fleet, "status", "--agent", fleet.a.grpc, "--token-file", str(fleet.token_a))
    assert run.code == 1 and run.err.count("\n") == 1, run.err
    assert "inference port (KServe v2)" in run.err and "edge-console agents" in run.err
    assert "Method not found" not in run.err
    with AgentClient(fleet.a.grpc, token=fleet.a.token) as client, \
            pytest.raises(InferencePortError, match="not its management API"):
        client.info()
    host, port = fleet.a.grpc.rsplit(":", 1)  # the TUI's probe says the same
    agent = FleetAgent(key=fleet.a.grpc, name="typo", host=host, port=int(port))
    connections = Connections(ConsoleSettings(discovery=False, default_token=fleet.a.token))
    try:
        result = connections.probe(agent)
    finally:
        connections.close()
    assert result.state is AgentState.UNREACHABLE and "inference port" in result.message


def test_a_missing_bundle_is_named_once(fleet: Fleet, tmp_path: Path) -> None:
    missing = tmp_path / "dist" / "x.edgepkg"
    run = console(fleet, "deploy", str(missing), "--agent", fleet.a.management,
                  "--token-file", str(fleet.token_a))
    assert run.code == 1 and "no such bundle file" in run.err
    assert run.err.count(str(missing)) == 1, run.err


def test_status_tables_are_not_cut_when_piped(served: InProcessAgent, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(served.token)
    with AgentClient(served.management, token=served.token) as client:
        reason = next(d.reason for d in client.deployments() if d.status == "failed")
    assert len(reason) > 80
    run = _piped("status", "--agent", served.management, "--token-file", str(token),
                 "--insecure")  # the in-process agent serves plaintext
    assert run.returncode == 0, run.stderr
    assert any(reason in line for line in run.stdout.splitlines()), run.stdout
    as_json = _piped("status", "--agent", served.management, "--token-file", str(token),
                     "--insecure",
                     "--json")
    assert json.loads(as_json.stdout)[0]["deployments"][0]["reason"] == reason
    agents = _piped("agents", "--no-mdns", "--insecure", "--agent", served.management,
                    "--token-file",
                    str(token))
    assert agents.returncode == 0, agents.stderr
    row = next(line for line in agents.stdout.splitlines() if served.management in line)
    assert "test-agent" in row and "mlp:2" in row and "given" in row, agents.stdout


def test_one_name_per_state_in_the_management_api_and_kserve(served: InProcessAgent) -> None:
    with AgentClient(served.management, token=served.token) as client:
        states = {v.version: v.state for v in client.models("mlp")}
    with tc.InferenceServerClient(served.grpc) as triton:
        index = {int(m.version): m.state for m in
                 triton.get_model_repository_index().models if m.name == "mlp"}
    assert states[2] == index[2] == "READY"
    assert states[1] == index[1] == "UNAVAILABLE"  # on disk, not in memory: one name


def test_rejected_requests_count_as_failed_requests(served: InProcessAgent) -> None:
    wrong = tc.InferInput("input", [1, 3], "FP32")  # the model takes [batch, 64]
    wrong.set_data_from_numpy(np.zeros((1, 3), np.float32))
    with tc.InferenceServerClient(served.grpc) as triton:
        for _ in range(8):
            with pytest.raises(InferenceServerException) as err:
                triton.infer("mlp", [wrong])
            assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        stats = triton.get_inference_statistics("mlp", "2").model_stats[0].inference_stats
        assert stats.fail.count == 8  # (success counts the deploy's probe and parity check)

    def errors_stored() -> list[dict[str, Any]]:  # the recorder flushes once a second
        run = _piped("metrics", "--state-dir", str(served.state_dir), "--json",
                     module="edge_agent.cli")
        assert run.returncode == 0, run.stderr
        points = [p for p in json.loads(run.stdout)["points"] if p["version"] == 2]
        return points if points and points[0]["errors"] >= 8 else []

    points = eventually(errors_stored, timeout=60, interval=0.2,
                        message="metrics.db never held the 8 errors of version 2")
    point = points[0]
    # 8 errors of 11: the deploy's health probe and its 2 parity-check requests succeeded
    assert point["errors"] == 8 and point["error_rate"] == 8 / point["requests"] > 0.7, point
    table = _piped("metrics", "--state-dir", str(served.state_dir), module="edge_agent.cli")
    assert table.returncode == 0 and f"8 ({point['error_rate']:.1%})" in table.stdout, \
        table.stdout
    assert all(len(line) <= 200 for line in table.stdout.splitlines())  # not padded out


def test_every_browsing_command_spells_the_mdns_flags_alike() -> None:
    agents = build_parser().parse_args(["agents", "--mdns-interface", "127.0.0.1", "--no-mdns"])
    ui = build_tui_parser().parse_args(["--mdns-interface", "127.0.0.1", "--no-mdns"])
    for args in (agents, ui):
        assert args.mdns_interface == ["127.0.0.1"] and args.no_mdns
    old = build_tui_parser().parse_args(["--interface", "127.0.0.1", "--no-discovery"])
    assert old.mdns_interface == ["127.0.0.1"] and old.no_mdns  # the old spelling still works
    old = build_parser().parse_args(["agents", "--interface", "127.0.0.1", "--no-discovery"])
    assert old.mdns_interface == ["127.0.0.1"] and old.no_mdns
    for helptext in (build_tui_parser().format_help(),
                     console(None, "agents", "--help").out):
        assert "--mdns-interface" in helptext and "--no-mdns" in helptext
        assert "--interface" not in helptext.replace("--mdns-interface", "")
        assert "--no-discovery" not in helptext
