"""Regenerate the checked-in stubs in ``edge_agent/management/generated/``.

The one way to regenerate (from the repository root, after editing ``protos/management.proto``)::

    python -m edge_agent.management.regen

The .proto is compiled as ``edge_agent/management/generated/management.proto`` so the generated
imports are absolute. ``tests/agent_management/test_stubs_fresh.py`` fails when they are stale.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent / "protos"
GENERATED_DIR = Path(__file__).resolve().parent / "generated"
PACKAGE_PATH = "edge_agent/management/generated"
PROTO_FILES = ("management.proto",)

INIT_TEXT = '''"""Generated edge.agent.v1 stubs. DO NOT EDIT.

Regenerate: ``python -m edge_agent.management.regen``. grpcio-tools {tools_version}.
"""
'''


def _tools_version() -> str:
    from importlib.metadata import version

    return version("grpcio-tools")


def generate(out_dir: Path) -> list[Path]:
    """Compile the .proto files into ``out_dir`` (created); return the files written."""
    from grpc_tools import protoc

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edge-mgmt-regen-") as tmp:
        root = Path(tmp)
        pkg = root / PACKAGE_PATH
        pkg.mkdir(parents=True)
        for name in PROTO_FILES:
            shutil.copyfile(PROTO_DIR / name, pkg / name)
        args = ["grpc_tools.protoc", f"-I{root}", f"--python_out={root}",
                f"--pyi_out={root}", f"--grpc_python_out={root}"]
        args += [f"{PACKAGE_PATH}/{name}" for name in PROTO_FILES]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + ", ".join(PROTO_FILES))
        written = []
        for src in sorted(pkg.iterdir()):
            if src.suffix == ".proto":
                continue
            dst = out_dir / src.name
            dst.write_text(src.read_text())
            written.append(dst)
        init = out_dir / "__init__.py"
        init.write_text(INIT_TEXT.format(tools_version=_tools_version()))
        written.append(init)
    return sorted(written)


def main() -> int:
    """Regenerate the checked-in stubs in place."""
    if GENERATED_DIR.exists():
        shutil.rmtree(GENERATED_DIR)
    for path in generate(GENERATED_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
