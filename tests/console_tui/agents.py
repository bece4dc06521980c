"""Real agents for the console tests: ``edge-agent serve`` processes (inference gRPC,
management gRPC with a token, mDNS bound to 127.0.0.1 only), ports from the OS.

Management is plaintext (``--insecure``; the console apps in these tests pass ``insecure``
too) unless ``tls=True``: these tests are about the UI. TLS and pinning through the console's
connections are tested in tests/agent_management/test_tls.py."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from packager.samples import make_mlp
from tests.support.models import make_fragile_model, make_nan_model

PROFILE = "x86_64-cpu-onnxruntime"
LOOPBACK = ("127.0.0.1",)
START_DEADLINE_S = 120.0
STOP_DEADLINE_S = 30.0
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class BundleSet:
    """MLP bundles: versions 1 and 2 signed for this machine's profile, version 2 also for
    arm64, an unsigned version 3 and a fragile version 4."""

    public_key: Path
    mlp: dict[int, Path]
    arm64: Path
    unsigned: Path
    fragile: Path  # version 4: passes warm-up and probe, fails requests holding values >= 21
    nan: Path  # version 5: passes every check before the upload, fails the health probe


def build_test_bundles(root: Path) -> BundleSet:
    """Build the bundles with edge-pack's library (a few seconds)."""
    private, public = generate_keypair(root / "keys")
    out = root / "bundles"
    mlp: dict[int, Path] = {}
    src: dict[int, Path] = {}
    for version, seed in ((1, 11), (2, 22)):
        src[version] = make_mlp(root / f"mlp-{version}.onnx", seed=seed, hidden=16)
        (mlp[version],) = build_bundles(src[version], name="mlp", version=version,
                                        profiles=[PROFILE], out_dir=out, key_path=private,
                                        dynamic_batch=True)
    (arm64,) = build_bundles(src[2], name="mlp", version=2, profiles=["arm64-cpu-onnxruntime"],
                             out_dir=out, key_path=private, dynamic_batch=True)
    (unsigned,) = build_bundles(src[1], name="mlp", version=3, profiles=[PROFILE],
                                out_dir=root / "unsigned", dynamic_batch=True)
    (fragile,) = build_bundles(make_fragile_model(root / "fragile.onnx"), name="mlp", version=4,
                               profiles=[PROFILE], out_dir=out, key_path=private,
                               dynamic_batch=True)
    (nan,) = build_bundles(make_nan_model(root / "nan.onnx"), name="mlp", version=5,
                           profiles=[PROFILE], out_dir=out, key_path=private,
                           dynamic_batch=True, allow_parity_failure=True)
    return BundleSet(public_key=public, mlp=mlp, arm64=arm64, unsigned=unsigned,
                     fragile=fragile, nan=nan)


READY = re.compile(r"edge-agent ready: .*?management on (?P<mgmt>\S+?);")


@dataclass
class RunningAgent:
    """One ``edge-agent serve`` process (its own process group); :meth:`stop` ends it."""

    name: str
    state_dir: Path
    proc: subprocess.Popen[str]
    address: str = ""  # HOST:PORT of the management API
    output: list[str] = field(default_factory=list)

    @property
    def token(self) -> str:
        """The management token (created by the agent in its state directory)."""
        return (self.state_dir / "management.token").read_text().strip()

    @property
    def agent_id(self) -> str:
        """The agent's id (as advertised)."""
        return (self.state_dir / "agent-id").read_text().strip()

    def stop(self) -> None:
        """SIGTERM (the advert is withdrawn, requests drained); SIGKILL if it hangs."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def start_agent(root: Path, name: str, public_key: Path, *, mdns: bool = True,
                profile: str = PROFILE, tls: bool = False) -> RunningAgent:
    """Start ``edge-agent serve`` called ``name`` with its state under ``root / name``,
    inference and management on 127.0.0.1 port 0, mDNS (if asked) on 127.0.0.1 only."""
    state_dir = root / name
    state_dir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir", str(state_dir),
            "--grpc", "127.0.0.1:0", "--no-uds", "--management", "127.0.0.1:0",
            "--name", name, "--trust", str(public_key), "--profile", profile]
    args += ["--mdns-interface", LOOPBACK[0]] if mdns else ["--no-mdns"]
    args += [] if tls else ["--insecure"]
    proc = subprocess.Popen(args, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    agent = RunningAgent(name=name, state_dir=state_dir, proc=proc)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            agent.output.append(line)
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if match := READY.search(line):
            agent.address = match["mgmt"]
            return agent
    agent.stop()
    raise RuntimeError(f"agent {name} did not start:\n" + "".join(agent.output))
