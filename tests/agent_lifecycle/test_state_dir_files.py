"""The state directory on disk: created when missing, private whatever the umask (issue 19),
and an unwritable one reported as such, not as a corrupt database (issue 17)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from edge_agent.client.agent_client import AgentClient
from tests.agent_lifecycle.test_state_dir_lock import one_error_line
from tests.support.bundles import Bundles
from tests.support.harness import ROOT, AgentProcess

PRIVATE = ("agent.lock", "agent-id", "management.token", "state.db", "state.db-wal",
           "state.db-shm", "metrics.db", "metrics.db-wal", "metrics.db-shm")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_serve_creates_a_missing_state_dir_and_keeps_everything_private_under_umask_000(
        bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "fresh" / "device" / "state"
    agent = AgentProcess(tmp_path / "unused", trust=bundles.public_key)
    # start() creates its state_dir ("unused"); the agent is told the missing one instead
    agent.args[agent.args.index("--state-dir") + 1] = str(state)
    agent.args.remove("--no-uds")  # the default socket, STATE_DIR/run/inference.sock
    assert not state.parent.exists()
    old = os.umask(0o000)  # the agent inherits it, as from a careless shell
    try:
        agent.start()
    finally:
        os.umask(old)
    try:
        with AgentClient(agent.management,
                         token=(state / "management.token").read_text().strip()) as client:
            assert client.deploy(bundles.mlp[1]).ok
        for d in (tmp_path / "fresh", tmp_path / "fresh" / "device", state):
            assert _mode(d) == 0o700, d
        for name in PRIVATE:
            assert _mode(state / name) == 0o600, name
        model = state / "models" / "mlp" / "1"
        assert (model / "manifest.json").is_file()
        # the socket's own mode admits its group's apps; its directory lets them reach it
        sock = state / "run" / "inference.sock"
        assert sock.is_socket() and _mode(sock) == 0o660 and _mode(sock.parent) == 0o755
        for p in [state / "models", *state.rglob("*")]:
            if p.parent.name == "run" or p.name == "run":
                continue
            if p.is_dir():
                assert _mode(p) == 0o700, p
            else:
                assert _mode(p) & 0o077 == 0, p
    finally:
        agent.stop()


def test_add_bundle_extracts_private_files_under_umask_000(bundles: Bundles,
                                                           tmp_path: Path) -> None:
    state = tmp_path / "new-state"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "edge_agent.cli", "add-bundle", "--state-dir",
                          str(state), "--pubkey", str(bundles.public_key), str(bundles.mlp[1])],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                         umask=0o000, check=False)
    assert out.returncode == 0, out.stderr
    paths = [state, *state.rglob("*")]
    assert any(p.name == "model.onnx" or p.suffix == ".onnx" for p in paths)
    for p in paths:
        assert _mode(p) == (0o700 if p.is_dir() else 0o600), p


def _serve_unwritable(state: Path) -> subprocess.CompletedProcess[str]:
    """``serve`` on ``state`` made unwritable for it. Root may write any directory, so as root
    ``state`` is bind-mounted read-only in a private mount namespace (skipped where that is
    not allowed); otherwise the directory is chmod 0555."""
    args = [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir", str(state),
            "--grpc", "127.0.0.1:0", "--no-uds"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare(1) for a read-only bind mount as root")
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
        if probe.returncode != 0:
            pytest.skip(f"cannot create a mount namespace: {probe.stderr.decode().strip()}")
        script = 'mount --bind -o ro "$1" "$1" && shift && exec "$@"'
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                               "sh", str(state), *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    state.chmod(0o555)
    try:
        return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120, check=False)
    finally:
        state.chmod(0o755)


@pytest.mark.parametrize("ran_before", [False, True], ids=["empty", "with-state"])
def test_an_unwritable_state_dir_is_reported_as_not_writable(tmp_path: Path,
                                                             ran_before: bool) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    if ran_before:  # an earlier agent left its lock, databases, token and id here
        first = AgentProcess(state, extra=["--no-mdns"])
        first.start()
        first.stop()
        assert (state / "state.db").is_file() and (state / "agent.lock").is_file()
    before = sorted((p.name, p.stat().st_size) for p in state.iterdir())
    line = one_error_line(_serve_unwritable(state))
    assert line.startswith(f"edge-agent serve: error: state directory {state} is not writable")
    assert "corrupt" not in line and "chown" in line
    assert sorted((p.name, p.stat().st_size) for p in state.iterdir()) == before


def test_a_pre_created_open_state_dir_is_made_private(bundles: Bundles, tmp_path: Path) -> None:
    """A state dir created beforehand 0755 (``mkdir`` under umask 022, ``install -d``) is made
    0700 at start (logged at INFO); what the agent writes in it is private (issue 27)."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o755)
    agent = AgentProcess(state, trust=bundles.public_key)
    serve = agent.args.index("serve")
    agent.args[serve:serve] = ["--log-level", "INFO"]  # a global option, before the command
    with agent:
        assert _mode(state) == 0o700
        assert _mode(state / "management.token") == 0o600
        out = "".join(agent.output)
        assert f"state directory {state} was mode 0755" in out, out[-2000:]
