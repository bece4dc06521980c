"""grpcio's private and experimental names appear in one module only:
edge_agent/grpc_internals.py, where each is documented and checked at start (the
generated stubs aside: grpcio-tools writes them)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("edge_agent", "console")
HOME = "edge_agent/grpc_internals.py"
GENERATED = ("edge_agent/frontends/grpc/generated/", "edge_agent/management/generated/")
PRIVATE = re.compile(
    r"experimental_"  # experimental_thread_pool, experimental_non_blocking, ...
    r"|\bgrpc\._"  # grpc._server, grpc._utilities, grpc._cython
    r"|cygrpc"
    r"|\._replace\("  # the method handler namedtuple's private copy
    r"|\b_max_workers\b|\b_thread_name_prefix\b"  # ThreadPoolExecutor's private fields
    r"|def add_(generic_rpc|registered_method)_handlers"  # a stand-in server capturing handlers
)


def private_uses(root: Path, packages: tuple[str, ...], home: str) -> list[str]:
    """``path:line: text`` of every private or experimental grpcio name outside ``home``."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == home or rel.startswith(GENERATED):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PRIVATE.search(line):
                    found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_grpc_private_names_live_in_one_module() -> None:
    assert private_uses(ROOT, PACKAGES, HOME) == []
    assert private_uses(ROOT, ("edge_agent",), "") != [], "the home module itself is not seen"


def test_the_scan_catches_each_kind(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    lines = ["run.experimental_thread_pool = pool",
             "from grpc._server import _Context",
             "from grpc._cython import cygrpc",
             "handler = handler._replace(unary_unary=f)",
             "n = self._max_workers",
             "class Capture:\n    def add_registered_method_handlers(self, s, h): pass",
             "names = handler_replace(x)  # not a private name"]
    (pkg / "mod.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (pkg / "home.py").write_text("x.experimental_non_blocking = True\n", encoding="utf-8")
    found = private_uses(tmp_path, ("pkg",), "pkg/home.py")
    assert [f.split(":")[1] for f in found] == ["1", "2", "3", "4", "5", "7"]
