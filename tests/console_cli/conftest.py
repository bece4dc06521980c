"""Two real agents (in-process threads, management over TLS on 127.0.0.1 port 0; one
advertised over mDNS on 127.0.0.1 only) and a runner for edge-console subprocesses.

The consoles find both agents' certificates pinned in ``HOME/edge-console/known_agents`` (as an
operator's console would after the first contact), so every subcommand here runs over TLS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agent_management.bundles import Bundles, build_all
from tests.agent_management.inproc import InProcessAgent, sections, start_agent

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    return build_all(tmp_path_factory.mktemp("console-bundles"))


@dataclass
class Fleet:
    a: InProcessAgent  # advertised on 127.0.0.1
    b: InProcessAgent  # not advertised
    token_a: Path
    token_b: Path
    home: Path  # XDG_CONFIG_HOME for the console subprocesses


@pytest.fixture(scope="module")
def fleet(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("fleet")
    a = start_agent(root / "a", sections("agent-a", bundles.public_key,
                                         mdns_interfaces=("127.0.0.1",)),
                    workers=4, tls=True)
    try:
        b = start_agent(root / "b", sections("agent-b", bundles.public_key),
                        workers=4, tls=True)
    except BaseException:
        a.stop()
        raise
    try:
        token_a, token_b = root / "a.token", root / "b.token"
        token_a.write_text(a.token + "\n")
        token_b.write_text(b.token + "\n")
        home = root / "home"
        (home / "edge-console").mkdir(parents=True)
        (home / "edge-console" / "known_agents").write_text(
            f"{a.management} {a.fingerprint} agent-a\n{b.management} {b.fingerprint} agent-b\n")
        yield Fleet(a, b, token_a, token_b, home)
    finally:
        b.stop()
        a.stop()


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def console(fleet: Fleet | None, *args: str, timeout: float = 120) -> Run:
    """Run ``python -m console.cli ARGS`` and capture what it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    if fleet is not None:
        env["XDG_CONFIG_HOME"] = str(fleet.home)
    proc = subprocess.run([sys.executable, "-m", "console.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)
