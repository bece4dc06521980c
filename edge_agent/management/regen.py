"""Regenerate the checked-in stubs in ``edge_agent/management/generated/``.

The one way to regenerate (from the repository root, after editing ``protos/management.proto``)::

    python -m edge_agent.management.regen

The .proto is compiled as ``edge_agent/management/generated/management.proto`` so the generated
imports are absolute. ``tests/agent_management/test_stubs_fresh.py`` fails when they are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from edge_agent.protogen import compile_protos, regenerate_in_place

PROTO_DIR = Path(__file__).resolve().parent / "protos"
GENERATED_DIR = Path(__file__).resolve().parent / "generated"
PACKAGE_PATH = "edge_agent/management/generated"
PROTO_FILES = ("management.proto",)

INIT_TEXT = '''"""Generated edge.agent.v1 stubs. DO NOT EDIT.

Regenerate: ``python -m edge_agent.management.regen``. grpcio-tools {tools_version}.
"""
'''


def generate(out_dir: Path) -> list[Path]:
    """Compile the .proto files into ``out_dir`` (created); return the files written."""
    return compile_protos(PROTO_DIR, PACKAGE_PATH, PROTO_FILES, out_dir, init_text=INIT_TEXT)


def main() -> int:
    """Regenerate the checked-in stubs in place."""
    return regenerate_in_place(GENERATED_DIR, generate)


if __name__ == "__main__":
    sys.exit(main())
