"""edge-agent's management-related command line, end to end in subprocesses: serve's flags,
SIGHUP reloading agent.toml, token, metrics and install-service."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge_agent.client.agent_client import AgentClient
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import ROOT, AgentProcess


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge_agent.cli", *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120, check=False)


def test_serve_help_lists_the_management_flags() -> None:
    out = _cli("serve", "--help").stdout
    for flag in ("--management", "--name", "--trust", "--allow-unsigned", "--mdns-interface",
                 "--no-mdns", "--no-metrics"):
        assert flag in out
    for sub in ("token", "metrics", "install-service"):
        assert _cli(sub, "--help").returncode == 0


def test_sighup_reloads_the_trust_settings_and_token_metrics_commands(
        bundles: Bundles, tmp_path: Path) -> None:
    import tritonclient.grpc as tc

    config = tmp_path / "agent.toml"
    config.write_text("[management]\nallow_unsigned = false\n")
    state = tmp_path / "state"
    agent = AgentProcess(state, trust=bundles.public_key,
                         extra=["--no-mdns", "--config", str(config)])
    with agent:
        token = _cli("token", "--state-dir", str(state))
        assert token.returncode == 0
        assert token.stdout.strip() == (state / "management.token").read_text().strip()
        assert (state / "management.token").stat().st_mode & 0o777 == 0o600
        with AgentClient(agent.management, token=token.stdout.strip()) as client:
            refused = client.deploy(bundles.unsigned)
            assert not refused.ok and "unsigned" in refused.message
            config.write_text("[management]\nallow_unsigned = true\n")
            assert agent.proc is not None
            os.killpg(agent.proc.pid, signal.SIGHUP)
            agent.wait_for_output("configuration reloaded", timeout=60)
            accepted = client.deploy(bundles.unsigned)
            assert accepted.ok, accepted.message
        with tc.InferenceServerClient(agent.grpc) as triton:
            inp = tc.InferInput("input", [1, 64], "FP32")
            inp.set_data_from_numpy(np.zeros((1, 64), np.float32))
            for _ in range(5):
                assert triton.infer("mlp", [inp]).get_response().model_version == "5"
        def listed() -> subprocess.CompletedProcess[str] | None:  # flushed once a second
            shown = _cli("metrics", "--state-dir", str(state))
            return shown if "mlp" in shown.stdout else None

        shown = eventually(listed, timeout=30, interval=0.5,
                           message="edge-agent metrics never listed mlp")
        assert shown.returncode == 0 and "mlp" in shown.stdout and "p99 ms" in shown.stdout


def test_token_needs_an_existing_state_dir(tmp_path: Path) -> None:
    out = _cli("token", "--state-dir", str(tmp_path / "missing"))
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "does not exist" in out.stderr


def test_install_service_prints_a_notify_unit(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.toml"
    out = _cli("install-service", "--print", "--config", str(cfg), "--executable",
               "/usr/local/bin/edge-agent")
    assert out.returncode == 0, out.stderr
    assert f"ExecStart=/usr/local/bin/edge-agent serve --config {cfg}" in out.stdout
    assert "Type=notify" in out.stdout and "WatchdogSec=" in out.stdout


def test_serve_refuses_a_private_key_as_trust_before_starting(bundles: Bundles,
                                                              tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    out = _cli("serve", "--state-dir", str(state), "--grpc", "127.0.0.1:0", "--no-uds",
               "--management", "127.0.0.1:0", "--no-mdns", "--trust", str(bundles.private_key))
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "is a private key" in out.stderr and str(bundles.private_key) in out.stderr
    assert list(state.iterdir()) == []  # refused before anything was created


def test_a_port_in_use_is_one_line_without_grpc_log(bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = f"127.0.0.1:{held.getsockname()[1]}"
        for flag, other in (("--grpc", "--management"), ("--management", "--grpc")):
            out = _cli("serve", "--state-dir", str(state), "--no-uds", "--no-mdns", "--trust",
                       str(bundles.public_key), flag, busy, other, "127.0.0.1:0")
            assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
            assert f"{flag} " in out.stderr and f"cannot listen on {busy}" in out.stderr
            assert "Address already in use" in out.stderr and "add_port" not in out.stderr
            assert "GRPC_VERBOSITY" not in out.stderr


def test_routine_start_up_lines_are_not_warnings(bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    added = _cli("add-bundle", str(bundles.mlp[1]), "--state-dir", str(state), "--pubkey",
                 str(bundles.public_key))
    assert added.returncode == 0, added.stderr
    with AgentProcess(state, trust=bundles.public_key, tls=True) as agent:
        assert agent.grpc  # ready: the version installed offline was taken in and activated
    start = "".join(agent.output)
    assert "WARNING" not in start, start


def test_add_bundle_refuses_another_arch_as_a_deploy_does(bundles: Bundles,
                                                           tmp_path: Path) -> None:
    from edge_agent.deploy.compat import check_fits
    from edge_agent.deploy.device import detect_device
    from edge_agent.deploy.errors import IncompatibleBundleError
    from packager.bundle.reader import open_bundle

    with open_bundle(bundles.arm64) as reader, \
            pytest.raises(IncompatibleBundleError) as deploy_refusal:
        check_fits(reader.manifest, detect_device())
    state = tmp_path / "state"
    out = _cli("add-bundle", str(bundles.arm64), "--state-dir", str(state), "--pubkey",
               str(bundles.public_key))
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert str(deploy_refusal.value) in out.stderr
    assert not (state / "models").exists()
