"""Shared protoc driver for the checked-in gRPC stubs (inference and management services).

Each service's ``regen`` module names its .proto files and package path and calls
:func:`compile_protos`; the stubs are compiled as ``<package_path>/<name>.proto`` so their
imports are absolute. The staleness tests compare a fresh compile with the checked-in files.

The compiler is pinned (:data:`GRPCIO_TOOLS`): its protobuf gencode version is the lowest
protobuf runtime the stubs load on, so the oldest compiler gives the widest range (gencode 5.29.0
loads on protobuf 5.29.1 to 7.x). That grpcio-tools needs protobuf<6, which cannot share a venv
with the newest tritonclient (protobuf>=6.30,<7), so protoc runs in a venv of its own, made on
first use under the user's cache directory (``$XDG_CACHE_HOME/edgeship``) and reused after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

GRPCIO_TOOLS = "1.71.2"
"""The grpcio-tools that compiles the checked-in stubs (gencode protobuf 5.29.0, grpcio 1.71.2)."""


class GeneratorUnavailableError(RuntimeError):
    """The pinned grpcio-tools could not be installed (no package registry, no cache)."""


def tools_version() -> str:
    """The grpcio-tools version the stubs are compiled with (recorded in their docstring)."""
    return GRPCIO_TOOLS


def generator_python() -> Path:
    """A Python that has grpcio-tools :data:`GRPCIO_TOOLS`: this one, or a cached venv."""
    try:
        if version("grpcio-tools") == GRPCIO_TOOLS:
            return Path(sys.executable)
    except PackageNotFoundError:
        pass
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgeship"
    root = cache / f"grpcio-tools-{GRPCIO_TOOLS}"
    python = root / "bin" / "python"
    if python.exists():
        return python
    # built beside it and renamed into place: a concurrent run finds it whole or not at all
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{root.name}.", dir=cache) as tmp:
        build = Path(tmp) / "venv"
        venv.create(build, with_pip=True)
        out = subprocess.run([str(build / "bin" / "python"), "-m", "pip", "install", "--quiet",
                              f"grpcio-tools=={GRPCIO_TOOLS}"],
                             capture_output=True, text=True, timeout=900, check=False)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise GeneratorUnavailableError(
                f"cannot install grpcio-tools=={GRPCIO_TOOLS} into {root} to compile the "
                f"stubs: {last}; or install it in this environment (pip install "
                f"grpcio-tools=={GRPCIO_TOOLS}, which needs protobuf<6)")
        with contextlib.suppress(OSError):  # another run got there first: use its venv
            build.rename(root)
    return python


def compile_protos(proto_dir: Path, package_path: str, proto_files: Sequence[str],
                   out_dir: Path, *, init_text: str,
                   transform: Callable[[str, str], str] | None = None,
                   skip: Sequence[str] = ()) -> list[Path]:
    """Compile ``proto_files`` from ``proto_dir`` into ``out_dir`` (created).

    ``transform(text, filename)`` may rewrite each generated module; files named in ``skip``
    are dropped; ``init_text`` (formatted with ``tools_version``) becomes ``__init__.py``.
    Returns the files written, sorted.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edge-protogen-") as tmp:
        root = Path(tmp)
        pkg = root / package_path
        pkg.mkdir(parents=True)
        for name in proto_files:
            shutil.copyfile(proto_dir / name, pkg / name)
        args = [f"-I{root}", f"--python_out={root}", f"--pyi_out={root}",
                f"--grpc_python_out={root}"]
        args += [f"{package_path}/{name}" for name in proto_files]
        run = ("import sys\nfrom grpc_tools import protoc\n"
               "sys.exit(protoc.main(['grpc_tools.protoc', *sys.argv[1:]]))\n")
        out = subprocess.run([str(generator_python()), "-c", run, *args], capture_output=True,
                             text=True, timeout=300, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"protoc failed on {', '.join(proto_files)}: {out.stderr}")
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
