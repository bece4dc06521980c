"""The layer contracts in pyproject.toml's ``[tool.importlinter]`` hold (docs/architecture.md).

``lint-imports`` (import-linter, in the ``[dev]`` extra) reads every import the three packages
can run, function-level ones included, and checks each contract; a broken one fails here with
the import chain that breaks it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_every_layer_contract_is_kept() -> None:
    assert LINT_IMPORTS.exists(), (
        f"{LINT_IMPORTS} is missing: install the test tools with pip install -e '.[dev]'")
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["importlinter"]["contracts"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    # --no-cache: a cache written by another checkout must not answer for this one
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"lint-imports failed:\n{output}"
    # every contract in pyproject.toml was checked, none skipped
    summary = re.search(r"Contracts: (\d+) kept, (\d+) broken", output)
    assert summary is not None, output
    assert (int(summary[1]), int(summary[2])) == (len(contracts), 0), output
