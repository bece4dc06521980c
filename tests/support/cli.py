"""Running ``edge-console`` as a subprocess the way an operator would, output captured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[2]


class HasHome(Protocol):
    """Anything that names the console's configuration home (e.g. a test fleet)."""

    home: Path


@dataclass
class Run:
    """What one ``edge-console`` run printed, and its exit code."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def console(fleet: HasHome | None, *args: str, timeout: float = 120) -> Run:
    """Run ``python -m console.cli ARGS`` (with ``fleet.home`` as XDG_CONFIG_HOME when given)
    and capture what it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    if fleet is not None:
        env["XDG_CONFIG_HOME"] = str(fleet.home)
    proc = subprocess.run([sys.executable, "-m", "console.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)
