"""Shared protoc driver for the checked-in gRPC stubs (inference and management services).

Each service's ``regen`` module names its .proto files and package path and calls
:func:`compile_protos`; the stubs are compiled as ``<package_path>/<name>.proto`` so their
imports are absolute. The staleness tests compare a fresh compile with the checked-in files.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path


def tools_version() -> str:
    """The installed grpcio-tools version (recorded in the generated package's docstring)."""
    return version("grpcio-tools")


def compile_protos(proto_dir: Path, package_path: str, proto_files: Sequence[str],
                   out_dir: Path, *, init_text: str,
                   transform: Callable[[str, str], str] | None = None,
                   skip: Sequence[str] = ()) -> list[Path]:
    """Compile ``proto_files`` from ``proto_dir`` into ``out_dir`` (created).

    ``transform(text, filename)`` may rewrite each generated module; files named in ``skip``
    are dropped; ``init_text`` (formatted with ``tools_version``) becomes ``__init__.py``.
    Returns the files written, sorted.
    """
    from grpc_tools import protoc

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edge-protogen-") as tmp:
        root = Path(tmp)
        pkg = root / package_path
        pkg.mkdir(parents=True)
        for name in proto_files:
            shutil.copyfile(proto_dir / name, pkg / name)
        args = ["grpc_tools.protoc", f"-I{root}", f"--python_out={root}",
                f"--pyi_out={root}", f"--grpc_python_out={root}"]
        args += [f"{package_path}/{name}" for name in proto_files]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + ", ".join(proto_files))
        written = []
        for src in sorted(pkg.iterdir()):
            if src.suffix == ".proto" or src.name in skip:
                continue
            text = src.read_text()
            if transform is not None:
                text = transform(text, src.name)
            dst = out_dir / src.name
            dst.write_text(text)
            written.append(dst)
        init = out_dir / "__init__.py"
        init.write_text(init_text.format(tools_version=tools_version()))
        written.append(init)
    return sorted(written)


def regenerate_in_place(generated_dir: Path, generate: Callable[[Path], list[Path]]) -> int:
    """Replace ``generated_dir`` with a fresh compile and print the files written."""
    if generated_dir.exists():
        shutil.rmtree(generated_dir)
    cwd = Path.cwd()
    for path in generate(generated_dir):
        print(path.relative_to(cwd) if path.is_relative_to(cwd) else path)
    return 0
