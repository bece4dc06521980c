"""Regenerate the checked-in protobuf/gRPC stubs in ``edge_agent/protocol/generated/``.

The one way to regenerate (run from the repository root after editing ``protos/*.proto``)::

    python -m edge_agent.protocol.regen

The .proto files are compiled as ``edge_agent/protocol/generated/*.proto`` so the generated
imports are absolute (``from edge_agent.protocol.generated import model_config_pb2``). The
generated modules register their descriptors in a private pool (``generated.POOL``) instead of
protobuf's default pool: tritonclient registers the same ``inference.*`` names there, and a
process that imports both (a test, a client app) would otherwise fail with "duplicate symbol".
``tests/agent_grpc/test_stubs_fresh.py`` fails when the checked-in stubs are stale.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent / "protos"
GENERATED_DIR = Path(__file__).resolve().parent / "generated"
PACKAGE_PATH = "edge_agent/protocol/generated"
PROTO_FILES = ("model_config.proto", "grpc_service.proto")

_DEFAULT_POOL = "_descriptor_pool.Default()"
_PRIVATE_POOL = "_edge_generated.POOL"
_POOL_IMPORT = "from edge_agent.protocol import generated as _edge_generated\n"

INIT_TEXT = '''"""Generated KServe v2 stubs; regenerate: ``python -m edge_agent.protocol.regen``.

DO NOT EDIT. grpcio-tools {tools_version}. The modules here register their descriptors in
``POOL`` (a private pool), so they coexist with tritonclient's copies of the same messages.
"""

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
'''


def _tools_version() -> str:
    from importlib.metadata import version

    return version("grpcio-tools")


def _private_pool(text: str, filename: str) -> str:
    if _DEFAULT_POOL not in text:
        raise RuntimeError(f"{filename}: generated code has no {_DEFAULT_POOL}; "
                           "grpcio-tools changed its output, update regen.py")
    text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL)
    marker = "# @@protoc_insertion_point(imports)\n"
    return text.replace(marker, marker + _POOL_IMPORT, 1)


def generate(out_dir: Path) -> list[Path]:
    """Compile the .proto files into ``out_dir`` (created); return the files written."""
    from grpc_tools import protoc

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edge-regen-") as tmp:
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
            if src.suffix == ".proto" or src.name == "model_config_pb2_grpc.py":
                continue  # model_config.proto has no services
            text = src.read_text()
            if src.name.endswith("_pb2.py"):
                text = _private_pool(text, src.name)
            dst = out_dir / src.name
            dst.write_text(text)
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
        print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
