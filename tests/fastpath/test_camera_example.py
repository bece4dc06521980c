"""examples/camera_shared_memory.py runs against a real agent over the Unix socket."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fastpath.conftest import Served

ROOT = Path(__file__).resolve().parents[2]


def _camera_objects() -> set[str]:
    return {p for p in os.listdir("/dev/shm") if p.startswith("camera_")}


def test_camera_example_infers_through_shared_memory(served: Served) -> None:
    before = _camera_objects()
    out = subprocess.run(
        [sys.executable, "examples/camera_shared_memory.py", "--url", f"unix:{served.uds}",
         "--model", "mlp", "--shape", "2,64", "--frames", "3"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("probs [2, 10] top class") == 3
    assert "(0 tensor bytes in the reply)" in out.stdout
    assert _camera_objects() <= before  # the example destroyed its regions
