"""What the three command lines (edge-pack, edge-agent, edge-console) write to stdout: in a
pipe whose reader has gone (``... | head -c 10``) they end quietly; with ``--json`` stdout holds
one JSON document and nothing else. Real subprocesses, real pipes, a real agent (TLS, HTTP on)
and real bundles."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from packager.pipes import BROKEN_PIPE_EXIT
from tests.support.bundles import Bundles
from tests.support.harness import ROOT, AgentProcess

MODULES = {"edge-pack": "packager.cli", "edge-agent": "edge_agent.cli",
           "edge-console": "console.cli"}


def _env(home: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    if home is not None:
        env["XDG_CONFIG_HOME"] = str(home)  # the console's known_agents: never the user's
    return env


def _run(cli: str, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", MODULES[cli], *args], cwd=ROOT,
                          env=_env(home), capture_output=True, text=True, timeout=300,
                          check=False)


def _into_a_gone_head(command: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``command`` with stdout a pipe that ``head -c 10`` read 10 bytes from and left:
    every write of the command meets a closed pipe."""
    read, write = os.pipe()
    try:
        head = subprocess.Popen(["head", "-c", "10"], stdin=read, stdout=subprocess.DEVNULL)
        os.close(read)
        os.write(write, b"0123456789")
        assert head.wait(60) == 0  # the reader is gone
        return subprocess.run(command, stdout=write, stderr=subprocess.PIPE, cwd=ROOT,
                              env=_env(), timeout=120, check=False)
    finally:
        os.close(write)


@pytest.mark.parametrize("cli,args", [
    ("edge-pack", ["inspect", "--json", "BUNDLE"]),
    ("edge-pack", ["inspect", "BUNDLE"]),  # a rich table
    ("edge-agent", ["check", "--json", "BUNDLE"]),
    ("edge-agent", ["token", "--state-dir", "STATE"]),
    ("edge-console", ["agents", "--no-mdns", "--agent", "127.0.0.1:1", "--json"]),
])
def test_a_closed_pipe_ends_the_command_quietly_with_141(
        cli: str, args: list[str], bundles: Bundles, tmp_path: Path) -> None:
    values = {"BUNDLE": str(bundles.mlp[1]), "STATE": str(tmp_path)}
    done = _into_a_gone_head([sys.executable, "-m", MODULES[cli],
                              *[values.get(a, a) for a in args]])
    err = done.stderr.decode()
    assert "Broken pipe" not in err and "Traceback" not in err, err
    if cli == "edge-agent" and args[0] == "token":  # may write its fingerprint line first
        err = "".join(ln for ln in err.splitlines(keepends=True)
                      if "fingerprint" not in ln and "first contact" not in ln)
    assert err == "", f"{cli} {args}: {err}"
    assert done.returncode == BROKEN_PIPE_EXIT


def test_help_into_a_closed_pipe_is_quiet() -> None:
    for module in MODULES.values():
        done = _into_a_gone_head([sys.executable, "-m", module, "--help"])
        # argparse drops a help text it could not write and exits 0
        assert done.stderr.decode() == "" and done.returncode in (0, BROKEN_PIPE_EXIT)


def _json_commands() -> set[tuple[str, str]]:
    """(cli, subcommand) of every subcommand with a --json flag, read from the parsers."""
    from console.cli import build_parser as console_parser
    from edge_agent.cli import build_parser as agent_parser
    from packager.cli import _parser as pack_parser

    found = set()
    for cli, parser in (("edge-pack", pack_parser()), ("edge-agent", agent_parser()),
                        ("edge-console", console_parser())):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if any("--json" in a.option_strings for a in sub._actions):
                        found.add((cli, name))
    return found


@pytest.fixture(scope="module")
def served(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[AgentProcess, str]]:
    """A real agent process, management over TLS, HTTP on, mlp version 1 deployed."""
    state = tmp_path_factory.mktemp("json-agent") / "state"
    with AgentProcess(state, trust=bundles.public_key, tls=True,
                      extra=["--no-mdns", "--http", "127.0.0.1:0"]) as agent:
        with agent.client() as client:
            assert client.deploy(bundles.mlp[1]).ok
        http = re.search(r"HTTP on (\S+?);", "".join(agent.output))
        assert http, "".join(agent.output)
        yield agent, http[1]


def test_every_json_output_is_one_json_document(served: tuple[AgentProcess, str],
                                                bundles: Bundles, tmp_path: Path) -> None:
    agent, http = served
    state = str(agent.state_dir)
    token = tmp_path / "agent.token"
    token.write_text((agent.state_dir / "management.token").read_text())
    home = tmp_path / "home"  # a console meeting the agent for the first time
    mgmt = ["--agent", agent.management, "--token-file", str(token), "--accept-new"]
    runs: list[tuple[str, list[str], tuple[int, ...]]] = [
        ("edge-pack", ["inspect", str(bundles.mlp[1]), "--json"], (0,)),
        ("edge-pack", ["profiles", "--json"], (0,)),
        ("edge-agent", ["check", str(bundles.mlp[1]), "--trust", str(bundles.public_key),
                        "--json"], (0,)),
        ("edge-agent", ["doctor", "--state-dir", state, "--json"], (0, 1)),
        ("edge-agent", ["metrics", "--state-dir", state, "--json"], (0,)),
        ("edge-agent", ["perf", "-m", "mlp", "-u", agent.grpc, "-p", "300", "--json"], (0,)),
        ("edge-agent", ["perf", "-m", "mlp", "-i", "http", "-u", http, "-p", "300", "--json"],
         (0,)),
        ("edge-agent", ["tune", "mlp", "--agent", agent.management, "--state-dir", state,
                        "--concurrency", "1", "--seconds", "0.3", "--max-candidates", "1",
                        "--json"], (0,)),
        ("edge-console", ["agents", "--no-mdns", *mgmt, "--json"], (0,)),
        ("edge-console", ["status", *mgmt, "--json"], (0,)),
        ("edge-console", ["deploy", str(bundles.mlp[2]), *mgmt, "--json"], (0,)),
        ("edge-console", ["settings", "mlp", *mgmt, "--json"], (0,)),
        ("edge-console", ["rollback", "mlp", *mgmt, "--dry-run", "--json"], (0,)),
        ("edge-console", ["rollback", "mlp", *mgmt, "--json"], (0,)),
        ("edge-console", ["remove", "mlp", "--version", "2", *mgmt, "--json"], (0,)),
        ("edge-console", ["doctor", *mgmt, "--json"], (0, 1)),
        ("edge-console", ["logs", *mgmt, "--tail", "5", "--json"], (0,)),
    ]
    for cli, args, codes in runs:
        done = _run(cli, *args, home=home)
        assert done.returncode in codes, f"{cli} {args}: {done.stderr}"
        try:
            json.loads(done.stdout)
        except ValueError as exc:
            raise AssertionError(f"{cli} {' '.join(args)}: stdout is not one JSON document "
                                 f"({exc}):\n{done.stdout}") from None
    assert {(cli, args[0]) for cli, args, _ in runs} == _json_commands()
