"""Run an example script of examples/ the way its README says, against a real agent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_example(script: str, workdir: Path,
                timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """``python SCRIPT --workdir WORKDIR`` from the repository root; its output captured."""
    return subprocess.run([sys.executable, script, "--workdir", str(workdir)],
                          capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
