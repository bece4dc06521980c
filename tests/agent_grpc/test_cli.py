"""edge-agent add-bundle and serve end to end, in subprocesses, stopped by the test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as tc

from tests.agent_grpc.conftest import ORT, Sources

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edge_agent.cli", *args], env=ENV,
                          capture_output=True, text=True, timeout=120)


def test_help_teaches() -> None:
    for args in ((), ("serve",), ("add-bundle",)):
        out = _cli(*args, "--help")
        assert out.returncode == 0 and "examples:" in out.stdout


def test_add_bundle_then_serve(sources: Sources, tmp_path: Path) -> None:
    state = tmp_path / "state"
    bundle = sources.bundles[f"mlp-1-{ORT}"]
    refused = _cli("add-bundle", "--state-dir", str(state), str(bundle))
    assert refused.returncode == 1 and "--allow-unsigned" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    added = _cli("add-bundle", "--state-dir", str(state), "--allow-unsigned", str(bundle))
    assert added.returncode == 0, added.stderr
    assert "installed mlp version 1" in added.stdout
    assert (state / "models" / "mlp" / "1" / "manifest.json").is_file()
    again = _cli("add-bundle", "--state-dir", str(state), "--allow-unsigned", str(bundle))
    assert again.returncode == 1 and "--replace" in again.stderr
    replaced = _cli("add-bundle", "--state-dir", str(state), "--allow-unsigned", "--replace",
                    str(bundle))
    assert replaced.returncode == 0 and "replaced" in replaced.stdout

    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir", str(state),
         "--grpc", "127.0.0.1:0", "--uds", str(sock)],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until the ready line (or exit)
        assert "edge-agent ready" in line, line + proc.stderr.read()
        port = re.search(r"127\.0\.0\.1:(\d+)", line).group(1)
        assert "mlp:1(READY)" in line
        x = np.random.default_rng(0).random((2, 64), dtype=np.float32)
        for url in (f"127.0.0.1:{port}", f"unix:{sock}"):
            client = tc.InferenceServerClient(url)
            inp = tc.InferInput("input", [2, 64], "FP32")
            inp.set_data_from_numpy(x)
            out = client.infer("mlp", [inp]).as_numpy("probs")
            client.close()
            np.testing.assert_allclose(out, sources.reference("mlp", x), atol=1e-5)
        assert sock.is_socket()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not sock.exists(), "the socket file is removed on shutdown"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("add-bundle", "--state-dir", "{tmp}/s", "--allow-unsigned", "{tmp}/nope.edgepkg"),
         "does not exist"),
        (("add-bundle", "--state-dir", "{tmp}/s", "--allow-unsigned", "{tmp}/junk.edgepkg"),
         "junk.edgepkg"),
        (("serve", "--state-dir", "{tmp}/junk.edgepkg", "--no-uds", "--grpc", "127.0.0.1:0"),
         "is not a directory"),
        (("serve", "--state-dir", "{tmp}", "--grpc", "localhost"), "--grpc"),
        (("serve", "--state-dir", "{tmp}", "--config", "{tmp}/bad.toml"), "models.mlp.instances"),
    ],
)
def test_failures_are_one_clear_line(tmp_path: Path, args, needle: str) -> None:
    (tmp_path / "junk.edgepkg").write_bytes(b"not a bundle at all")
    (tmp_path / "bad.toml").write_text('[models.mlp]\ninstances = "two"\n')
    out = _cli(*(a.format(tmp=tmp_path) for a in args))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_serve_refuses_a_socket_in_use(sources: Sources, tmp_path: Path) -> None:
    """A second agent on the same Unix socket fails clearly instead of stealing it."""
    import socket

    sock_path = tmp_path / "busy.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(1)
    try:
        (tmp_path / "models").mkdir()
        t0 = time.monotonic()
        out = _cli("serve", "--state-dir", str(tmp_path), "--uds", str(sock_path), "--grpc",
                   "none")
        assert out.returncode == 1 and "another server is listening" in out.stderr, out.stderr
        assert time.monotonic() - t0 < 120
    finally:
        listener.close()


def test_ctrl_c_drains_and_exits_zero(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) stops serve cleanly: exit 0, no traceback, socket removed."""
    (tmp_path / "models").mkdir()
    sock = tmp_path / "s.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir", str(tmp_path),
         "--grpc", "127.0.0.1:0", "--uds", str(sock)],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "edge-agent ready" in line and "models: none" in line, line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "Traceback" not in proc.stderr.read()
        assert not sock.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
