"""examples/infer_http.py against a real agent, with tritonclient.http and with plain JSON."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent_http.conftest import HttpAgent

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("extra", [[], ["--plain"]])
def test_infer_http_example(http_agent: HttpAgent, extra: list[str]) -> None:
    out = subprocess.run([sys.executable, "examples/infer_http.py", "--url", http_agent.http,
                          "--model", "mlp", "--version", "1", "--shape", "2,64", *extra],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert "mlp version 1 answered" in out.stdout and "probs [2, 10]" in out.stdout
