"""The deploy pipeline is protocol-free: importing edge_agent.deploy never imports grpc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_manager_never_imports_grpc_or_the_console() -> None:
    code = ("import json, sys\n"
            "import edge_agent.deploy, edge_agent.deploy.manager, edge_agent.deploy.device\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert not loaded & {"grpc", "console", "textual", "zeroconf"}
