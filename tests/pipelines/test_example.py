"""examples/pipeline/run.py runs end to end against a real agent subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_pipeline_example_runs_and_matches_local_computation(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "examples/pipeline/run.py", "--workdir",
                          str(tmp_path / "w")], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "classify: ok version 1 is active" in out.stdout
    assert out.stdout.count("  image ") == 4
    assert "the same labels as the steps computed here: yes" in out.stdout
