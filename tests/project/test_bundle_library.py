"""The bundle format is a library of its own (`packager/bundle/`): a device imports it without
ONNX, OpenVINO, ONNX Runtime or the converters, and the agent and the console import nothing
else of the packager."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.project.test_import_hygiene import ROOT, _modules_loaded_by, _submodules

HEAVY = {"onnx", "openvino", "onnxruntime", "tensorrt", "pycuda", "skl2onnx", "onnxmltools",
         "oras", "requests"}
"""What a device must not pay for when it reads a bundle (the registry client imports oras and
requests only when it talks to a registry)."""

DEVICE_SIDE = ("packager.bundle", "packager.extras", "packager.pipes")
"""What ``edge_agent/`` and ``console/`` may import from the packager: the bundle format, and
two standard-library-only modules the three CLIs share (the table of the distribution's extras,
and the quiet exit when the reader of their output goes away)."""


def test_the_bundle_library_imports_no_runtime_and_no_converter() -> None:
    modules = _submodules("packager.bundle")
    # the library's modules are all there (a move that left one behind fails here)
    for name in ("manifest", "reader", "signing", "profiles", "datatypes", "errors", "format",
                 "writer", "parity", "pipeline", "oci.ref", "oci.client", "oci.transfer"):
        assert f"packager.bundle.{name}" in modules
    loaded = _modules_loaded_by(modules)
    assert set(modules) <= loaded
    assert not {m.split(".")[0] for m in loaded} & HEAVY, sorted(
        m for m in loaded if m.split(".")[0] in HEAVY)
    outside = sorted(m for m in loaded if m.startswith("packager.")
                     and not m.startswith("packager.bundle"))
    assert outside == [], f"packager.bundle pulls in the build tool: {outside}"


def _packager_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``packager`` import in ``path``, function-level ones included;
    ``from packager import x`` counts as ``packager.x``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.split(".")[0] == "packager"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "packager":
                found += [(node.lineno, f"packager.{a.name}") for a in node.names]
            elif node.module.startswith("packager."):
                found.append((node.lineno, node.module))
    return found


def test_the_agent_and_the_console_import_only_the_bundle_library() -> None:
    seen, refused = 0, []
    for package in ("edge_agent", "console"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "generated" in path.parts:
                continue
            for line, module in _packager_imports(path):
                seen += 1
                if not any(module == d or module.startswith(f"{d}.") for d in DEVICE_SIDE):
                    refused.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert seen > 50  # the scan sees the agent's and the console's real imports
    assert refused == [], "import the bundle format (packager.bundle) instead:\n" + "\n".join(
        refused)
