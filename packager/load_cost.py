"""The memory an artifact costs once loaded: the resident-set growth of creating its runtime
session in a fresh process (the runtime already imported). An ONNX Runtime session is made as
the agent makes it under a memory budget (``packager.bundle.ort_memory``) and run once on zeros
as the agent's warm-up does, so weights mapped from external data count once they are read.

Run in a child process (``python -m packager.load_cost BACKEND ENTRY [PRECISION]`` prints the
bytes) so that memory the build freed earlier does not hide the cost. The agent uses the figure
for its memory budget until it has measured the version on the device itself.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from packager.bundle.ort_memory import keep_one_copy

_TIMEOUT_S = 300


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _measure_here(backend: str, entry: Path, precision: str) -> int:
    if backend == "onnxruntime":
        import onnxruntime  # (the runtime's own import is not the model's cost)

        before = _rss()
        runner: object = _warm_session(onnxruntime, entry)
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


_ZEROS = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
          "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
          "tensor(uint8)": "uint8", "tensor(bool)": "bool"}


def _warm_session(ort: Any, entry: Path) -> Any:
    """An ONNX Runtime session of ``entry`` as the budgeted agent makes it, run once on zeros
    (dynamic dims 1) when every input is numeric: the agent's figure includes its warm-up."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    keep_one_copy(so, ort)
    session = ort.InferenceSession(str(entry), so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in session.get_inputs():
        if i.type not in _ZEROS:
            return session
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        feeds[i.name] = np.zeros(shape, _ZEROS[i.type])
    with contextlib.suppress(Exception):  # a graph that refuses zeros: the load's figure alone
        session.run(None, feeds)
    return session


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
