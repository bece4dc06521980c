"""Fresh virtual environments with one extra of this checkout installed (real pip, pip's cache),
for the tests that check what each machine's install holds and what it lives beside.

``venv_with`` skips the test, with pip's own words, only when pip cannot reach a registry; it
prints the site-packages size of each install (``du``) on the terminal, captured or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S = 900


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment with one extra of the project installed."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with the venv first on PATH and no PYTHONPATH."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=cwd or self.root, env=self.env,
                              capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)

    def python(self, code: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``code`` with the venv's Python (``python -c``)."""
        return self.run(str(self.bin / "python"), "-c", code, *args)

    def pip(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``pip ARGS`` in the venv; a failed install fails the test with pip's last words."""
        out = self.run(str(self.bin / "python"), "-m", "pip", *args)
        assert out.returncode == 0, f"pip {' '.join(args)}:\n{out.stdout[-2000:]}" \
                                    f"{out.stderr[-3000:]}"
        return out

    def installed(self, names: list[str]) -> dict[str, bool]:
        code = ("import importlib.metadata as md, json, sys\n"
                "def has(n):\n"
                "    try:\n        md.distribution(n)\n        return True\n"
                "    except md.PackageNotFoundError:\n        return False\n"
                "print(json.dumps({n: has(n) for n in sys.argv[1:]}))\n")
        out = self.python(code, *names)
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    def version(self, dist: str) -> str:
        """The installed version of distribution ``dist``."""
        out = self.python("import importlib.metadata as md, sys; print(md.version(sys.argv[1]))",
                          dist)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def site_packages_mib(self) -> float:
        """Disk use of site-packages as ``du -sk`` reports it, in MiB."""
        sp = next(self.root.glob("lib/python3*/site-packages"))
        out = subprocess.run(["du", "-sk", str(sp)], capture_output=True, text=True,
                             timeout=300, check=True)
        return int(out.stdout.split()[0]) / 1024


def _registry_unreachable(venv: Venv, scratch: Path) -> str | None:
    """pip's last words when it cannot fetch a small package from a registry, else None."""
    probe = venv.run(str(venv.bin / "python"), "-m", "pip", "download", "--no-deps",
                     "--dest", str(scratch), "hatchling")
    if probe.returncode == 0:
        return None
    return (probe.stderr.strip().splitlines() or ["(no output)"])[-1]


def report(config: pytest.Config, line: str) -> None:
    """Write ``line`` on the terminal even when output is captured (the install sizes)."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if terminal is None or capture is None:  # pragma: no cover - -p no:terminal / no:capture
        print(line)
        return
    with capture.global_and_fixture_disabled():
        terminal.write_line(line)


def venv_with(extra: str, tmp: Path, config: pytest.Config) -> Venv:
    """A new venv under ``tmp`` with ``edgeship[extra]`` from this checkout (not editable)."""
    venv = Venv(tmp / extra)
    subprocess.run([sys.executable, "-m", "venv", str(venv.root)], check=True, timeout=300)
    out = venv.run(str(venv.bin / "python"), "-m", "pip", "install", "--quiet",
                   f"{ROOT}[{extra}]")
    if out.returncode != 0:
        why = _registry_unreachable(venv, tmp / f"{extra}-probe")
        if why is not None:
            pytest.skip(f"pip cannot reach a package registry ({why})")
        pytest.fail(f"pip install edgeship[{extra}] failed:\n{out.stderr[-3000:]}")
    report(config, f"\nedgeship[{extra}]: site-packages {venv.site_packages_mib():.0f} MiB (du)")
    return venv
