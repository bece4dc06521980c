"""systemd for real: the agent's unit, installed with ``edge-agent install-service`` as the README
says, in a Debian root file system booted with ``systemd-nspawn --boot``; driven from the host
over loopback (the container shares the host's network).

Prepared and run by ``scripts/systemd-check.sh`` (it builds and caches the root file system with
systemd and the toolkit in /opt/edge, and sets EDGE_NSPAWN_ROOT); skipped, with the reason,
anywhere else. What it proves: Type=notify reports READY only once the models serve, the
watchdog restarts a hung agent, kill -9 restarts it with the version it served, SIGTERM drains
and exits cleanly, under systemd 252 with the unit's hardening (DynamicUser, ProtectSystem...).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from edge_agent.client.agent_client import AgentClient
from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from packager.samples import make_mlp
from tests.support.eventually import eventually

ROOT_ENV = "EDGE_NSPAWN_ROOT"
VENV = "/opt/edge"
PROFILE = "x86_64-cpu-onnxruntime"
STATE = "/var/lib/private/edge-agent"  # DynamicUser's StateDirectory=edge-agent
X = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)


def _skip_reason() -> str | None:
    root = os.environ.get(ROOT_ENV)
    if not root:
        return f"{ROOT_ENV} is not set: run scripts/systemd-check.sh (root, systemd-nspawn)"
    if shutil.which("systemd-nspawn") is None or shutil.which("nsenter") is None:
        return "systemd-nspawn or nsenter is missing (Debian: systemd-container, util-linux)"
    if not Path(root, VENV.lstrip("/"), "bin", "edge-agent").exists():
        return f"{root} has no {VENV} with the toolkit (scripts/systemd-check.sh installs it)"
    if os.geteuid() != 0:
        return "systemd-nspawn needs root"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Container:
    """A booted root file system; :meth:`run` runs a command inside (nsenter)."""

    root: Path
    proc: subprocess.Popen[bytes]
    leader: int
    grpc: str
    management: str

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {"PATH": f"{VENV}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
               "SYSTEMD_PAGER": "", "HOME": "/root"}
        return subprocess.run(["nsenter", "-t", str(self.leader), "-a", *args], env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def show(self, *props: str) -> dict[str, str]:
        out = self.run("systemctl", "show", "edge-agent", "-p", ",".join(props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self) -> str:
        return self.run("journalctl", "-u", "edge-agent", "--no-pager", "-o", "cat").stdout

    def token(self) -> str:
        return (self.root / STATE.lstrip("/") / "management.token").read_text().strip()

    def client(self) -> AgentClient:
        return AgentClient(self.management, token=self.token(), timeout_s=60,
                           deploy_timeout_s=600)


def _leader(nspawn: int) -> int | None:
    """The container's PID 1 as the host sees it (nspawn's child)."""
    try:
        for task in Path(f"/proc/{nspawn}/task").iterdir():
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
    except OSError:
        return None
    return None


def _infer(grpc_address: str) -> str:
    """One request to mlp; the version that answered."""
    import tritonclient.grpc as tc

    with tc.InferenceServerClient(grpc_address) as triton:
        inp = tc.InferInput("input", list(X.shape), "FP32")
        inp.set_data_from_numpy(X)
        result = triton.infer("mlp", [inp], client_timeout=60)
    return str(result.get_response().model_version)


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    root = Path(os.environ[ROOT_ENV])
    host = tmp_path_factory.mktemp("nspawn")
    private, public = generate_keypair(host / "keys")
    etc = root / "etc" / "edge-agent"
    etc.mkdir(parents=True, exist_ok=True)
    shutil.copy(public, etc / "release.pub")
    bundles = root / "srv" / "bundles"
    bundles.mkdir(parents=True, exist_ok=True)
    for version in (1, 2):
        source = make_mlp(host / f"mlp-{version}.onnx", seed=version)
        for path in build_bundles(source, name="mlp", version=version, profiles=[PROFILE],
                                  out_dir=host / "out", key_path=private, dynamic_batch=True):
            shutil.copy(path, bundles / f"mlp-{version}.edgepkg")
    grpc_port, mgmt_port = _free_port(), _free_port()
    (etc / "agent.toml").write_text(f"""\
state_dir = "/var/lib/edge-agent"

[grpc]
address = "127.0.0.1:{grpc_port}"
uds_enabled = false

[management]
address = "127.0.0.1:{mgmt_port}"
name = "nspawn-agent"
trust = ["/etc/edge-agent/release.pub"]
insecure = true
watch_window_s = 0

[mdns]
enabled = false
""")
    # version 1 is on disk before the service first starts (as an image would ship it)
    (root / "var" / "lib" / "private").mkdir(parents=True, exist_ok=True, mode=0o700)
    seeded = subprocess.run(
        ["chroot", str(root), f"{VENV}/bin/edge-agent", "add-bundle", "--state-dir", STATE,
         "--pubkey", "/etc/edge-agent/release.pub", "/srv/bundles/mlp-1.edgepkg"],
        capture_output=True, text=True, timeout=300, check=False)
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr

    log = (host / "nspawn.log").open("wb")
    proc = subprocess.Popen(["systemd-nspawn", "-D", str(root), "--boot", "--register=no",
                             "--keep-unit", "--console=pipe", "-q"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        leader: list[int] = []

        def found() -> bool:
            pid = _leader(proc.pid)
            if pid is not None:
                leader.append(pid)
            assert proc.poll() is None, (host / "nspawn.log").read_text()
            return bool(leader)

        try:
            eventually(found, timeout=60, interval=0.5,
                       message="timed out waiting for the container's init")
        except AssertionError as exc:
            pytest.skip(f"systemd-nspawn did not start a container here: {exc}")
        box = Container(root, proc, leader[0], f"127.0.0.1:{grpc_port}",
                        f"127.0.0.1:{mgmt_port}")
        state: list[str] = []

        def booted() -> bool:  # the bus exists a moment after init starts
            run = box.run("systemctl", "is-system-running", "--wait", timeout=300)
            state.append(run.stdout.strip() or run.stderr.strip())
            return state[-1] in ("running", "degraded")

        try:
            eventually(booted, timeout=300, interval=0.5,
                       message="timed out waiting for the container to boot")
        except AssertionError:  # the machine, not the unit: it is not installed yet
            pytest.skip(f"the Debian root file system did not boot under systemd-nspawn here "
                        f"(systemctl is-system-running: {state[-1:]}); see "
                        f"{host / 'nspawn.log'}")
        yield box
    finally:
        _poweroff(proc, leader[0] if leader else None)
        log.close()


def _poweroff(proc: subprocess.Popen[bytes], leader: int | None) -> None:
    if proc.poll() is None and leader is not None:
        subprocess.run(["nsenter", "-t", str(leader), "-a", "systemctl", "poweroff",
                        "--no-block"], capture_output=True, timeout=60, check=False)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(90)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_installed_as_written_and_ready_only_when_models_serve(container: Container) -> None:
    installed = container.run(f"{VENV}/bin/edge-agent", "install-service", "--config",
                              "/etc/edge-agent/agent.toml")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "systemctl enable --now edge-agent" in installed.stdout
    verify = container.run("systemd-analyze", "verify", "/etc/systemd/system/edge-agent.service")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # what the installer said to run; with Type=notify it returns once the agent said READY=1
    started = container.run("systemctl", "enable", "--now", "edge-agent", timeout=600)
    assert started.returncode == 0, started.stdout + started.stderr + container.journal()
    # READY means serving: the very first request succeeds, no retry
    assert _infer(container.grpc) == "1"
    props = container.show("Type", "ActiveState", "SubState", "StatusText", "WatchdogUSec",
                           "User", "DynamicUser")
    assert props["Type"] == "notify" and props["ActiveState"] == "active", props
    assert props["StatusText"].startswith("serving 1 model(s): mlp:1"), props
    assert props["WatchdogUSec"] == "30s" and props["DynamicUser"] == "yes", props


def test_kill_9_restarts_with_the_version_it_served(container: Container) -> None:
    with container.client() as client:
        result = client.deploy(container.root / "srv" / "bundles" / "mlp-2.edgepkg")
        assert result.ok, result.message
    assert _infer(container.grpc) == "2"
    before = container.show("MainPID", "NRestarts")
    killed = container.run("kill", "-9", before["MainPID"])
    assert killed.returncode == 0, killed.stderr

    def restarted() -> bool:
        now = container.show("MainPID", "NRestarts", "ActiveState")
        return (now["ActiveState"] == "active" and now["MainPID"] not in ("0", before["MainPID"])
                and int(now["NRestarts"]) > int(before["NRestarts"]))

    eventually(restarted, timeout=180, interval=0.5,
               message="timed out waiting for systemd to restart the agent after kill -9")
    assert _infer(container.grpc) == "2"  # the version deployed before the kill


def test_the_watchdog_restarts_a_hung_agent(container: Container) -> None:
    before = container.show("MainPID", "NRestarts")
    # a hang: every thread stopped, so no watchdog keep-alive reaches systemd (WatchdogSec=30s)
    stopped = container.run("kill", "-STOP", before["MainPID"])
    assert stopped.returncode == 0, stopped.stderr

    def restarted() -> bool:
        now = container.show("MainPID", "NRestarts", "ActiveState")
        return (now["ActiveState"] == "active" and now["MainPID"] not in ("0", before["MainPID"])
                and int(now["NRestarts"]) > int(before["NRestarts"]))

    eventually(restarted, timeout=240, interval=0.5,
               message="timed out waiting for the watchdog to restart the hung agent")
    assert "Watchdog timeout" in container.run(
        "journalctl", "-u", "edge-agent", "--no-pager").stdout
    assert _infer(container.grpc) == "2"


def test_sigterm_drains_and_stops_cleanly(container: Container) -> None:
    import tritonclient.grpc as tc

    calls: list[tuple[float, str]] = []  # (when the call started, "ok" or the error)
    stop = threading.Event()

    def load() -> None:
        with tc.InferenceServerClient(container.grpc) as triton:
            inp = tc.InferInput("input", list(X.shape), "FP32")
            inp.set_data_from_numpy(X)
            while not stop.is_set():
                started = time.monotonic()
                try:
                    triton.infer("mlp", [inp], client_timeout=60)
                    calls.append((started, "ok"))
                except Exception as exc:  # once the stop began: refused, as expected
                    calls.append((started, str(exc)))
                    stop.wait(0.05)

    threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    eventually(lambda: len(calls) > 20, timeout=60, interval=0.5,
               message="timed out waiting for requests served under load")
    asked = time.monotonic()
    stopped = container.run("systemctl", "stop", "edge-agent", timeout=120)
    stop.set()
    for t in threads:
        t.join(60)
    assert stopped.returncode == 0, stopped.stderr
    props = container.show("ActiveState", "Result", "ExecMainStatus")
    assert props["ActiveState"] == "inactive" and props["Result"] == "success", props
    assert props["ExecMainStatus"] == "0", props  # exited by itself: no SIGKILL, no timeout
    # every call already in flight when the stop was asked for was answered: drained
    failed = [why for started, why in calls if started < asked and why != "ok"]
    assert not failed, failed[:3]
    # calls that came during the drain were refused with UNAVAILABLE "shutting down" (or could
    # not connect once the listener closed): a reason clients retry on
    refusals = [why for started, why in calls if started >= asked and why != "ok"]
    print(f"drain: {sum(w == 'ok' for _, w in calls)} served, {len(refusals)} refused; "
          f"kinds: {sorted({w.split(']')[0] for w in refusals})}")
