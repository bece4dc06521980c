"""A real agent process for tests: started in its own process group, stopped or SIGKILLed.

Runs ``python -m edge_agent.cli serve`` on 127.0.0.1 port 0 (inference and management), no
Unix socket, mDNS off unless asked, and reads the ready line for the real ports. The management
API is plaintext (``--insecure``) unless ``tls=True``: the tests that use this helper are about
crashes and recovery, not transport; :meth:`AgentProcess.client` picks the right client.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edge_agent.management.client import AgentClient

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"edge-agent ready: listening on (?P<listen>.*?); management on "
                   r"(?P<mgmt>\S+?);")


class AgentProcess:
    """One ``edge-agent serve`` subprocess. Use as a context manager (always stopped)."""

    def __init__(self, state_dir: Path, *, trust: Path | None = None,
                 allow_unsigned: bool = False, env: dict[str, str] | None = None,
                 extra: list[str] | None = None, tls: bool = False,
                 command: list[str] | None = None) -> None:
        """``command`` runs another installation's agent (e.g. ``[VENV/bin/edge-agent]``, with
        ``env`` its whole environment); by default this Python runs this checkout's."""
        self.state_dir = Path(state_dir)
        self.args = [*(command or [sys.executable, "-m", "edge_agent.cli"]), "serve",
                     "--state-dir", str(self.state_dir), "--grpc", "127.0.0.1:0", "--no-uds",
                     "--management", "127.0.0.1:0", "--name", "test-agent"]
        if trust is not None:
            self.args += ["--trust", str(trust)]
        if allow_unsigned:
            self.args.append("--allow-unsigned")
        self.tls = tls
        if not tls:
            self.args.append("--insecure")
        self.args += extra if extra is not None else ["--no-mdns"]
        self.env = ({**os.environ, "PYTHONPATH": str(ROOT), **(env or {})} if command is None
                    else dict(env or os.environ))
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self.grpc = self.management = ""

    def start(self, timeout: float = 120.0) -> AgentProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.args, env=self.env, cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            match = READY.search(line)
            if match:
                tcp = [t for t in match["listen"].split(", ") if not t.startswith("unix:")]
                self.grpc, self.management = tcp[0], match["mgmt"]
                return self
        self.kill()
        raise AssertionError("agent did not become ready:\n" + "".join(self.output))

    @property
    def fingerprint(self) -> str:
        """The management certificate's fingerprint (the agent creates it at first start)."""
        from edge_agent.management.tls import fingerprint_of

        return fingerprint_of(self.state_dir)

    def client(self, token: str | None = None, **kw: Any) -> AgentClient:
        """A management client: the certificate pinned when TLS is on; the token from the
        state directory unless given."""
        from edge_agent.management.client import AgentClient, PinnedTls

        token = token or (self.state_dir / "management.token").read_text().strip()
        tls = PinnedTls(self.fingerprint) if self.tls else None
        return AgentClient(self.management, token=token, tls=tls, **kw)

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for_file(self, path: Path, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{path} never appeared:\n" + "".join(self.output))
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the whole process group (kill -9)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit. Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
