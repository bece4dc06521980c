"""sd_notify over a real datagram socket, and the rendered unit checked by systemd-analyze."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from edge_agent.errors import ServiceInstallError
from edge_agent.service import UNIT_NAME, install_service, render_unit
from edge_agent.systemd_notify import SystemdNotifier


@pytest.fixture
def notify_socket(tmp_path: Path):
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    yield str(path), sock
    sock.close()


def _recv(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def test_no_socket_is_a_noop() -> None:
    n = SystemdNotifier(env={})
    assert not n.enabled
    assert n.ready() is False
    assert n.watchdog_interval_s is None
    assert n.start_watchdog() is False


def test_messages_arrive_on_the_socket(notify_socket) -> None:
    path, sock = notify_socket
    n = SystemdNotifier(env={"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.ready("serving 2\nmodels")
    assert _recv(sock) == ["READY=1", "STATUS=serving 2 models"]
    assert n.status("loading resnet v3")
    assert _recv(sock) == ["STATUS=loading resnet v3"]
    assert n.watchdog()
    assert _recv(sock) == ["WATCHDOG=1"]
    assert n.stopping()
    assert _recv(sock) == ["STOPPING=1"]


def test_abstract_socket() -> None:
    name = f"edge-agent-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(10)
        n = SystemdNotifier(env={"NOTIFY_SOCKET": "@" + name})
        assert n.ready()
        assert _recv(sock) == ["READY=1"]


def test_send_to_a_vanished_socket_does_not_raise(tmp_path: Path) -> None:
    n = SystemdNotifier(env={"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert n.ready() is False


def test_watchdog_thread_pings_at_half_interval_and_respects_health(notify_socket) -> None:
    path, sock = notify_socket
    healthy = threading.Event()
    healthy.set()
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid())}
    n = SystemdNotifier(env=env)
    assert n.watchdog_interval_s == pytest.approx(0.1)
    assert n.start_watchdog(healthy=healthy.is_set)
    try:
        for _ in range(3):
            assert _recv(sock) == ["WATCHDOG=1"]
        healthy.clear()
        # Drain what may have been sent before the flag flipped, then expect silence.
        sock.settimeout(0.5)
        drained = 0
        with pytest.raises(TimeoutError):
            while True:
                sock.recv(4096)
                drained += 1
                assert drained < 3, "pings continued while unhealthy"
    finally:
        n.stop_watchdog()


def test_watchdog_for_another_pid_is_ignored(notify_socket) -> None:
    path, _ = notify_socket
    n = SystemdNotifier(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000",
                             "WATCHDOG_PID": str(os.getpid() + 1)})
    assert n.watchdog_interval_s is None


def test_rendered_unit_has_the_required_settings() -> None:
    text = render_unit("/usr/local/bin/edge-agent", "/etc/edge-agent/agent.toml")
    for line in ("Type=notify", "NotifyAccess=main", "Restart=on-failure", "DynamicUser=yes",
                 "StateDirectory=edge-agent", "RuntimeDirectory=edge-agent",
                 "ExecStart=/usr/local/bin/edge-agent serve --config /etc/edge-agent/agent.toml",
                 "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                 "PrivateTmp=yes", "PrivateDevices=yes", "ProtectKernelTunables=yes",
                 "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                 "LockPersonality=yes", "SystemCallArchitectures=native"):
        assert line in text.splitlines(), line
    assert any(ln.startswith("WatchdogSec=") for ln in text.splitlines())
    assert "MemoryDenyWriteExecute=yes" not in text
    assert "@EXECUTABLE@" not in text and "@CONFIG@" not in text

    named = render_unit("/opt/e/bin/edge-agent", "/etc/edge-agent/agent.toml", "edge-agent",
                        gpu=True).splitlines()
    assert "User=edge-agent" in named and "DynamicUser=yes" not in named
    assert "PrivateDevices=yes" not in named
    assert any(ln.startswith("SupplementaryGroups=") for ln in named)


@pytest.mark.parametrize("exe,cfg,user", [
    ("edge-agent", "/etc/edge-agent/agent.toml", None),
    ("/usr/bin/edge agent", "/etc/edge-agent/agent.toml", None),
    ("/usr/bin/edge-agent", "/etc/x.toml", "bad user"),
])
def test_render_rejects_unsafe_values(exe: str, cfg: str, user: str | None) -> None:
    with pytest.raises(ServiceInstallError):
        render_unit(exe, cfg, user)


def _analyze(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (apt package: systemd)")
@pytest.mark.parametrize("user,gpu", [(None, False), ("edge-agent", True)])
def test_systemd_analyze_verify_passes(tmp_path: Path, user: str | None, gpu: bool) -> None:
    exe = tmp_path / "bin" / "edge-agent"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    unit = install_service(exe, "/etc/edge-agent/agent.toml", user, gpu=gpu,
                           unit_dir=tmp_path / "units", daemon_reload=False)
    assert unit.name == UNIT_NAME and oct(unit.stat().st_mode & 0o777) == "0o644"
    done = _analyze(unit)
    assert done.returncode == 0, done.stderr
    # verify only warns (exit 0) on unknown keys or bad values: any output is a finding.
    assert done.stderr.strip() == "", done.stderr
    # And it does catch mistakes, so the check above means something.
    unit.write_text(unit.read_text().replace("ProtectHome=yes", "ProtectHome=maybe"))
    assert "protect home" in _analyze(unit).stderr.lower()
