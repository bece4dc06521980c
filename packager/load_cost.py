"""The memory an artifact costs once loaded: the resident-set growth of creating its runtime
session in a fresh process (the runtime already imported), as the build's parity runtime does.

Run in a child process (``python -m packager.load_cost BACKEND ENTRY [PRECISION]`` prints the
bytes) so that memory the build freed earlier does not hide the cost. The agent uses the figure
for its memory budget until it has measured the version on the device itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_TIMEOUT_S = 300


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _measure_here(backend: str, entry: Path, precision: str) -> int:
    if backend == "onnxruntime":
        import onnxruntime  # noqa: F401  (the runtime's own import is not the model's cost)

        from packager.bundle.parity import onnxruntime_runner

        before = _rss()
        runner = onnxruntime_runner(entry)
    elif backend == "openvino":
        import openvino  # noqa: F401

        from packager.bundle.parity import openvino_runner

        before = _rss()
        runner = openvino_runner(entry, precision)
    else:
        raise ValueError(f"no load-cost measurement for backend {backend}")
    after = _rss()
    del runner
    return max(0, after - before)


def measure_load_cost(backend: str, entry: Path, precision: str = "f32") -> int:
    """Bytes loading ``entry`` with ``backend`` adds, measured in a child process; 0 when it
    cannot be measured (no runtime, no such backend)."""
    if backend not in ("onnxruntime", "openvino"):
        return 0
    try:
        done = subprocess.run([sys.executable, "-m", "packager.load_cost", backend, str(entry),
                               precision], capture_output=True, text=True, timeout=_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].isdigit():
        return 0
    return int(lines[-1])


def main(argv: list[str]) -> int:
    backend, entry = argv[0], Path(argv[1])
    precision = argv[2] if len(argv) > 2 else "f32"
    print(_measure_here(backend, entry, precision))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
