"""What a new user hit first (issue 23), each against a real agent process or real bundles:
``edge-agent metrics`` after a switch, ``token --out``, ``check`` of another device's bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.bundles import Bundles
from tests.support.harness import ROOT, AgentProcess


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge_agent.cli", *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120, check=False)


def test_metrics_shows_the_version_that_serves_after_a_switch(bundles: Bundles,
                                                                tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as agent, agent.client() as client:
        for version in (1, 2):
            result = client.deploy(bundles.mlp[version])
            assert result.ok, result.message
        serving = [v.version for v in client.models() if v.active]
        assert serving == [2]
        deadline = time.monotonic() + 60
        while True:  # the snapshot is written as the old version goes: wait for that
            shown = _cli("metrics", "--state-dir", str(state), "--json")
            assert shown.returncode == 0, shown.stderr
            models = {m["model"]: m for m in json.loads(shown.stdout)["residency"]["models"]}
            if models["mlp"]["loaded_versions"] == [2] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert models["mlp"]["serving_version"] == 2, models
        assert models["mlp"]["loaded_versions"] == [2], models
        table = _cli("metrics", "--state-dir", str(state))
        assert table.returncode == 0, table.stderr
        row = next(line for line in table.stdout.splitlines() if line.strip("│ ").startswith("mlp")
                   and "loaded" in line)
        assert "v2" in row and "v1" not in row, table.stdout


def test_token_out_writes_a_private_file_whatever_the_umask(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    out = tmp_path / "pi.token"
    out.write_text("an older token\n")
    out.chmod(0o644)  # as `> pi.token` left it
    written = subprocess.run(
        ["sh", "-c", 'umask 022; exec "$0" -m edge_agent.cli token --state-dir "$1" --out "$2"',
         sys.executable, str(state), str(out)], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)
    assert written.returncode == 0, written.stderr
    assert written.stdout == ""  # the token is in the file only
    assert "certificate fingerprint SHA256:" in written.stderr
    assert out.stat().st_mode & 0o777 == 0o600
    assert out.read_text() == (state / "management.token").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left
    piped = _cli("token", "--state-dir", str(state))  # without --out: stdout, as before
    assert piped.returncode == 0 and piped.stdout == out.read_text()


def test_token_out_refuses_a_symlink(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    victim = tmp_path / "shared.txt"
    victim.write_text("not a token\n")
    link = tmp_path / "pi.token"
    link.symlink_to(victim)
    refused = _cli("token", "--state-dir", str(state), "--out", str(link))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "symbolic link" in refused.stderr and str(link) in refused.stderr
    assert victim.read_text() == "not a token\n" and link.is_symlink()


def test_check_refuses_a_bundle_for_another_device_as_add_bundle_does(
        bundles: Bundles, tmp_path: Path) -> None:
    from edge_agent.deploy.device import detect_device

    assert detect_device().arch != "arm64", "this test needs a machine that is not arm64"
    state = tmp_path / "state"
    added = _cli("add-bundle", str(bundles.arm64), "--state-dir", str(state), "--pubkey",
                 str(bundles.public_key))
    assert added.returncode == 1
    for extra in ((), ("--json",)):
        checked = _cli("check", str(bundles.arm64), "--trust", str(bundles.public_key), *extra)
        assert checked.returncode == 1, checked.stdout
        assert "PASSED" not in checked.stdout and checked.stdout == ""
        assert checked.stderr.count("\n") == 1, checked.stderr
        assert "arm64-cpu-onnxruntime" in checked.stderr and "this device runs" in checked.stderr
        # one rule, one message: what add-bundle (and a deploy) says
        assert checked.stderr.split("error: ", 1)[1] == added.stderr.split("error: ", 1)[1]


def test_the_console_names_the_agents_http_port_instead_of_suggesting_insecure(
        bundles: Bundles, tmp_path: Path) -> None:
    import re

    state = tmp_path / "state"
    agent = AgentProcess(state, trust=bundles.public_key, tls=True,
                         extra=["--no-mdns", "--http", "127.0.0.1:0"])
    with agent:
        http = re.search(r"HTTP on (\S+?);", "".join(agent.output))
        assert http, "".join(agent.output)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path / "home")}
        for extra in ([], ["--insecure"], ["--accept-new"]):
            run = subprocess.run(
                [sys.executable, "-m", "console.cli", "status", "--agent", http[1],
                 "--token-file", str(state / "management.token"), *extra],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
            assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
            assert "the agent's HTTP (KServe REST) port" in run.stderr, run.stderr
            assert "--management" in run.stderr and "edge-console agents" in run.stderr
            assert "started with --insecure?" not in run.stderr
            assert "use --insecure" not in run.stderr
