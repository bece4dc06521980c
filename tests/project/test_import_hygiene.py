"""Architecture boundaries, checked in fresh interpreters.

- packager never imports the agent or the console, and none of the three pull in Textual
  unless they are the console;
- the serving core and the backends never import grpc (protocols sit at the edge);
- nothing imports TensorRT or pycuda unless a Jetson backend is used;
- clients stay light: `edge_agent.config` loads settings, not gRPC, zeroconf, SQLite or a
  runtime; `console.commands` loads no batcher, repository, backend or manager.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules_loaded_by(modules: list[str]) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=False, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.returncode == 0, f"importing {modules} failed:\n{out.stderr}"
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _submodules(package: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    path = ROOT / package.replace(".", "/")
    if not path.is_dir():
        return []
    names = [package]
    for info in pkgutil.walk_packages([str(path)], prefix=package + "."):
        if info.name.endswith(".__main__"):
            continue  # importing __main__ runs the command line
        if not any(info.name.startswith(s) for s in skip):
            names.append(info.name)
    return names


def _top(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


def test_packager_stays_independent() -> None:
    loaded = _top(_modules_loaded_by(_submodules("packager")))
    assert not loaded & {"edge_agent", "console", "textual", "grpc", "tensorrt", "pycuda"}


@pytest.mark.parametrize("package", ["edge_agent.core", "edge_agent.backends"])
def test_core_never_imports_protocols_or_ui(package: str) -> None:
    mods = _submodules(package, skip=("edge_agent.backends.tensorrt",))
    if len(mods) <= 1 and not (ROOT / package.replace(".", "/") / "__init__.py").exists():
        pytest.skip(f"{package} does not exist yet")
    loaded = _top(_modules_loaded_by(mods))
    assert not loaded & {"grpc", "textual", "console", "tensorrt", "pycuda",
                         "prometheus_client"}


def test_agent_never_imports_textual() -> None:
    mods = _submodules("edge_agent", skip=("edge_agent.backends.tensorrt",))
    loaded = _top(_modules_loaded_by(mods))
    assert "textual" not in loaded
    assert "console" not in loaded


def test_agent_config_is_light() -> None:
    # a client that reads or writes agent.toml gets the settings, not the agent's machinery
    loaded = _modules_loaded_by(["edge_agent.config"])
    heavy = {"grpc", "grpc_health", "zeroconf", "sqlite_utils", "sqlite3", "psutil",
             "onnxruntime", "openvino", "tensorrt", "pycuda", "numpy"}
    assert not _top(loaded) & heavy, sorted(_top(loaded) & heavy)
    ours = {m for m in loaded if m.startswith("edge_agent.")}
    assert "edge_agent.config.load" in ours
    # the configuration package is a leaf: nothing of the agent's but its own modules
    assert not {m for m in ours if not m.startswith("edge_agent.config")
                } - {"edge_agent", "edge_agent.errors"}, sorted(ours)


def test_console_commands_load_no_serving_core() -> None:
    loaded = _modules_loaded_by(["console.commands"])
    serving = sorted(m for m in loaded if m.startswith((
        "edge_agent.core", "edge_agent.backends", "edge_agent.deploy.manager",
        "edge_agent.metrics", "edge_agent.frontends.grpc", "edge_agent.server")))
    assert not serving, f"console.commands loads the agent's serving side: {serving}"
    assert not _top(loaded) & {"numpy", "onnx", "onnxruntime", "openvino", "textual"}


def test_backends_never_import_the_serving_core() -> None:
    # core -> backends only: a backend reaches other models through the Host it is given
    loaded = _modules_loaded_by(_submodules("edge_agent.backends",
                                            skip=("edge_agent.backends.tensorrt",)))
    assert "edge_agent.backends.pipeline_backend" in loaded
    core = sorted(m for m in loaded if m.startswith("edge_agent.core"))
    assert not core, f"edge_agent.backends loads the serving core: {core}"


def test_the_model_manager_reaches_the_data_plane_only_through_its_port() -> None:
    # edge_agent.core.deploy_port.DeployPort lists every call the deploy lifecycle makes
    internals = {"ModelRepository", "Orchestrator", "DataPlane", "ResponseCache"}
    reached = []
    for path in sorted((ROOT / "edge_agent" / "deploy").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "edge_agent.core"):
                reached += [f"{path.name}: imports {a.name}" for a in node.names
                            if a.name in internals]
            elif isinstance(node, ast.Attribute) and node.attr in {
                    "repository", "orchestrator", "response_cache"}:
                reached.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert (ROOT / "edge_agent" / "deploy" / "manager.py").is_file()
    assert not reached, reached
