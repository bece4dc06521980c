"""Every ``# type: ignore`` in the three packages names its error code and says why.

mypy (``scripts/test.sh``) already fails on an unused ignore and, with ``ignore-without-code``,
on one without a code; the reason after it is this test's part.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("packager", "edge_agent", "console")
GENERATED = ("edge_agent/frontends/grpc/generated", "edge_agent/management/generated")
# "# type: ignore[code, code]  # why", the reason being at least a few words' worth of text
WELL_FORMED = re.compile(r"#\s*type:\s*ignore\[[a-z-]+(,\s*[a-z-]+)*\]\s+#\s*\S.{5,}")


def unexplained_ignores(root: Path, packages: tuple[str, ...]) -> list[str]:
    """``path:line: comment`` of every type-ignore comment without a code and a reason."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(GENERATED):
                continue
            source = path.read_text(encoding="utf-8")
            for tok in tokenize.generate_tokens(io.StringIO(source).readline):
                if tok.type == tokenize.COMMENT and re.search(r"type:\s*ignore", tok.string) \
                        and not WELL_FORMED.search(tok.string):
                    found.append(f"{rel}:{tok.start[0]}: {tok.string}")
    return found


def test_every_type_ignore_names_its_code_and_reason() -> None:
    assert unexplained_ignores(ROOT, PACKAGES) == []


def test_the_check_catches_a_bare_or_unexplained_ignore(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(
        "a = f()  # type: ignore\n"
        "b = f()  # type: ignore[arg-type]\n"
        "c = f()  # type: ignore[arg-type]  # the stub is narrower than the runtime\n"
        "d = '# type: ignore'\n",
        encoding="utf-8")
    assert unexplained_ignores(tmp_path, ("pkg",)) == [
        "pkg/mod.py:1: # type: ignore",
        "pkg/mod.py:2: # type: ignore[arg-type]",
    ]
