"""The examples run against a real agent and print what the model answered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.agent_grpc.conftest import Agent

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)


def test_infer_grpc_over_the_unix_socket(agent: Agent) -> None:
    out = _run("examples/infer_grpc.py", "--socket", str(agent.addresses.uds), "--model", "mlp",
               "--version", "1", "--shape", "2,64")
    assert out.returncode == 0, out.stderr
    assert "mlp version 1 answered" in out.stdout and "probs [2, 10]" in out.stdout


def test_infer_tritonclient_over_tcp(agent: Agent) -> None:
    out = _run("examples/infer_tritonclient.py", "--url", agent.tcp, "--model", "squeezenet_ov",
               "--shape", "1,3,224,224")
    assert out.returncode == 0, out.stderr
    assert "squeezenet_ov version 1 answered" in out.stdout
    assert "softmaxout_1 [1, 1000, 1, 1]" in out.stdout
