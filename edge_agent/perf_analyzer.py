"""Find or install Triton's ``perf_analyzer`` and run it against an agent.

``perf_analyzer`` ships as a binary inside the ``tritonclient`` 2.41 wheel. It loads two shared
libraries the wheel does not carry: ``libb64.so.0d`` (Debian's ``libb64-0d``; scripts/system-deps.sh
installs it when run as root) and ``libcudart.so.12`` (the ``nvidia-cuda-runtime-cu12`` wheel; it
is loaded even for CPU-only runs). :func:`locate` uses the binary of this environment when it has
one, else installs both wheels once into ``$XDG_CACHE_HOME/edgeship/perf-analyzer-2.41.0`` (as
:mod:`edge_agent.protogen` does for grpcio-tools), and returns how to run it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TRITONCLIENT = "2.41.0"
"""The tritonclient release whose wheel carries the perf_analyzer binary."""
CUDA_RUNTIME = "nvidia-cuda-runtime-cu12"


class PerfAnalyzerUnavailableError(RuntimeError):
    """perf_analyzer could not be found or installed, or a library it loads is missing."""


@dataclass(frozen=True)
class PerfAnalyzer:
    """A runnable perf_analyzer: the binary and the environment it needs."""

    binary: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``perf_analyzer ARGS`` and return its completed process (output as text)."""
        return subprocess.run([str(self.binary), *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env, check=False)


def _cache_root() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgeship"
    return cache / f"perf-analyzer-{TRITONCLIENT}"


def _install(root: Path) -> None:
    """pip-install tritonclient 2.41 and the CUDA runtime wheel into ``root`` (built aside)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{root.name}.", dir=root.parent) as tmp:
        target = Path(tmp) / "t"
        out = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                              "--target", str(target), f"tritonclient=={TRITONCLIENT}",
                              CUDA_RUNTIME],
                             capture_output=True, text=True, timeout=900, check=False)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise PerfAnalyzerUnavailableError(
                f"cannot install tritonclient=={TRITONCLIENT} and {CUDA_RUNTIME} into {root} "
                f"for perf_analyzer: {last}")
        with contextlib.suppress(OSError):  # another run got there first: use its copy
            target.rename(root)


def _cuda_lib_dirs(roots: list[Path]) -> list[Path]:
    return [d for r in roots if (d := r / "nvidia" / "cuda_runtime" / "lib").is_dir()]


def locate(*, install: bool = True) -> PerfAnalyzer:
    """This environment's perf_analyzer (tritonclient 2.41) or the cached one, ready to run.

    Raises :class:`PerfAnalyzerUnavailableError` naming what is missing.
    """
    here = Path(sys.executable).parent / "perf_analyzer"
    site = [Path(p) for p in sys.path if p.endswith("site-packages")]
    root = _cache_root()
    binary = here if here.is_file() else root / "bin" / "perf_analyzer"
    lib_dirs = _cuda_lib_dirs([*site, root]) if binary == here else _cuda_lib_dirs([root])
    if not binary.is_file() or not lib_dirs:
        if not install:
            raise PerfAnalyzerUnavailableError(
                f"perf_analyzer is not installed (tritonclient=={TRITONCLIENT} and {CUDA_RUNTIME})")
        if not (root / "bin" / "perf_analyzer").is_file():
            _install(root)
        binary, lib_dirs = root / "bin" / "perf_analyzer", _cuda_lib_dirs([root])
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(d) for d in lib_dirs] + [p for p in [env.get("LD_LIBRARY_PATH", "")] if p])
    _check_libraries(binary, env)
    return PerfAnalyzer(binary, env)


def _check_libraries(binary: Path, env: dict[str, str]) -> None:
    """Raise naming the shared libraries ``binary`` cannot load (and where they come from)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return
    out = subprocess.run([ldd, str(binary)], capture_output=True, text=True, env=env, check=False)
    missing = re.findall(r"^\s*(\S+) => not found", out.stdout, re.M)
    if missing:
        hints = {"libb64.so.0d": "apt-get install libb64-0d",
                 "libcudart.so.12": f"pip install {CUDA_RUNTIME}"}
        raise PerfAnalyzerUnavailableError(
            f"perf_analyzer ({binary}) cannot load {', '.join(missing)}: "
            + "; ".join(hints.get(m, m) for m in missing))
