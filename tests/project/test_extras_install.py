"""Each machine gets only what it runs: ``pip install edgeship[agent]`` and
``edgeship[console]`` into fresh virtual environments, then the commands run there.

- ``[agent]``: ``edge-agent serve --help`` works and every agent module imports; no Textual,
  no ONNX toolchain (onnx), no OpenVINO; the bundle reader and ``edge-pack profiles`` work;
  the commands of other extras refuse in one line.
- ``[console]``: ``edge-console --help`` works and every console module imports; no inference
  runtime (onnxruntime, openvino, onnx).

Slow (two real pip installs from the package registry, about a minute each). Skipped, with
pip's own words, only when pip cannot reach a registry. Prints each install's site-packages
size (``du``): the README's Install table is that measurement.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.project.venvs import Venv, venv_with

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def agent_venv(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Venv:
    return venv_with("agent", tmp_path_factory.mktemp("extras"), pytestconfig)


@pytest.fixture(scope="module")
def console_venv(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Venv:
    return venv_with("console", tmp_path_factory.mktemp("extras"), pytestconfig)


def _import_all(venv: Venv, package: str) -> subprocess.CompletedProcess[str]:
    code = ("import importlib, pkgutil, sys\n"
            f"import {package} as p\n"
            "for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.'):\n"
            "    if not m.name.endswith('__main__'):\n"
            "        importlib.import_module(m.name)\n"
            "print('imported', len(sys.modules))\n")
    return venv.python(code)


def _one_line_refusal(out: subprocess.CompletedProcess[str], extra: str) -> None:
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"needs edgeship[{extra}]" in lines[0]
    assert f"pip install 'edgeship[{extra}]'" in lines[0]


def test_agent_install_serves_without_the_toolchain_or_the_console(agent_venv: Venv,
                                                                   tmp_path: Path) -> None:
    out = agent_venv.run(str(agent_venv.bin / "edge-agent"), "serve", "--help")
    assert out.returncode == 0, out.stderr
    assert "usage: edge-agent serve" in out.stdout
    have = agent_venv.installed(["onnxruntime", "grpcio", "zeroconf", "textual", "onnx",
                                 "openvino", "sqlite-utils", "tensorrt", "grpcio-health-checking"])
    # the agent serves grpc.health.v1 from its own stubs (protobuf 5.29.1 to 7.x), not from
    # grpcio-health-checking's (which follow the newest protobuf)
    assert have == {"onnxruntime": True, "grpcio": True, "zeroconf": True, "textual": False,
                    "onnx": False, "openvino": False, "sqlite-utils": False, "tensorrt": False,
                    "grpcio-health-checking": False}
    imported = _import_all(agent_venv, "edge_agent")
    assert imported.returncode == 0, imported.stderr
    # the bundle reader and the profiles need no ONNX toolchain
    profiles = agent_venv.run(str(agent_venv.bin / "edge-pack"), "profiles", "--json")
    assert profiles.returncode == 0, profiles.stderr
    assert "jetson-orin-tensorrt" in profiles.stdout
    reader = agent_venv.run(str(agent_venv.bin / "python"), "-c",
                            "import sys, packager.bundle.reader; print('onnx' in sys.modules)")
    assert reader.stdout.strip() == "False", reader.stderr
    # the other machines' commands say what to install, in one line
    _one_line_refusal(agent_venv.run(str(agent_venv.bin / "edge-pack"), "build", "m.onnx",
                                     "--name", "m", "--version", "1", "--profile", "p",
                                     "--out", str(tmp_path)), "pack")
    _one_line_refusal(agent_venv.run(str(agent_venv.bin / "edge-console"), "agents"), "console")
    assert not any(tmp_path.iterdir())  # the refused build wrote nothing


def test_console_install_has_no_inference_runtime(console_venv: Venv, tmp_path: Path) -> None:
    out = console_venv.run(str(console_venv.bin / "edge-console"), "--help")
    assert out.returncode == 0, out.stderr
    assert "usage: edge-console" in out.stdout
    have = console_venv.installed(["textual", "grpcio", "zeroconf", "onnxruntime", "openvino",
                                   "onnx", "tensorrt"])
    assert have == {"textual": True, "grpcio": True, "zeroconf": True, "onnxruntime": False,
                    "openvino": False, "onnx": False, "tensorrt": False}
    imported = _import_all(console_venv, "console")
    assert imported.returncode == 0, imported.stderr
    _one_line_refusal(console_venv.run(str(console_venv.bin / "edge-agent"), "serve",
                                       "--state-dir", str(tmp_path)), "agent")
