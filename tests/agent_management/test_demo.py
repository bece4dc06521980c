"""The demo (``python -m examples.demo``, run by scripts/demo.sh) end to end in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_the_whole_loop_and_exits_0(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    run = subprocess.run([sys.executable, "-m", "examples.demo", "--workdir", str(work)],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160"},
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    for n in range(1, 10):
        assert f"Step {n}" in out
    assert " 0 failed" in out and "version 1 is active (was 2)" in out
    assert "rollback" in out and "committed" in out and "demo finished" in out
    assert "agent stopped (exit code 0)" in out
    assert len(list((work / "bundles").glob("mlp-*.edgepkg"))) >= 8
