"""Regenerate the checked-in protobuf/gRPC stubs in ``edge_agent/frontends/grpc/generated/``.

The one way to regenerate (run from the repository root after editing ``protos/*.proto``)::

    python -m edge_agent.frontends.grpc.regen

The .proto files are compiled as ``edge_agent/frontends/grpc/generated/*.proto`` so the generated
imports are absolute (``from edge_agent.frontends.grpc.generated import model_config_pb2``). The
generated modules register their descriptors in a private pool (``generated.POOL``) instead of
protobuf's default pool: tritonclient registers the same ``inference.*`` names there, and a
process that imports both (a test, a client app) would otherwise fail with "duplicate symbol".
``tests/agent_grpc/test_stubs_fresh.py`` fails when the checked-in stubs are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from edge_agent.protogen import compile_protos, regenerate_in_place

PROTO_DIR = Path(__file__).resolve().parent / "protos"
GENERATED_DIR = Path(__file__).resolve().parent / "generated"
PACKAGE_PATH = "edge_agent/frontends/grpc/generated"
PROTO_FILES = ("model_config.proto", "grpc_service.proto", "health.proto")

_DEFAULT_POOL = "_descriptor_pool.Default()"
_PRIVATE_POOL = "_edge_generated.POOL"
_POOL_IMPORT = "from edge_agent.frontends.grpc import generated as _edge_generated\n"

INIT_TEXT = '''"""Generated KServe v2 stubs.

Regenerate: ``python -m edge_agent.frontends.grpc.regen``.

DO NOT EDIT. grpcio-tools {tools_version}. The modules here register their descriptors in
``POOL`` (a private pool), so they coexist with tritonclient's copies of the same messages.
"""

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
'''


def _private_pool(text: str, filename: str) -> str:
    if _DEFAULT_POOL not in text:
        raise RuntimeError(f"{filename}: generated code has no {_DEFAULT_POOL}; "
                           "grpcio-tools changed its output, update regen.py")
    text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL)
    marker = "# @@protoc_insertion_point(imports)\n"
    return text.replace(marker, marker + _POOL_IMPORT, 1)


def generate(out_dir: Path) -> list[Path]:
    """Compile the .proto files into ``out_dir`` (created); return the files written."""

    def transform(text: str, filename: str) -> str:
        return _private_pool(text, filename) if filename.endswith("_pb2.py") else text

    # model_config.proto has no services: drop its empty _grpc module
    return compile_protos(PROTO_DIR, PACKAGE_PATH, PROTO_FILES, out_dir, init_text=INIT_TEXT,
                          transform=transform, skip=("model_config_pb2_grpc.py",))


def main() -> int:
    """Regenerate the checked-in stubs in place."""
    return regenerate_in_place(GENERATED_DIR, generate)


if __name__ == "__main__":
    sys.exit(main())
