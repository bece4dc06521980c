"""Every install line in the README and docs/*.md names this project's distribution (pyproject's
``[project] name``) and extras it has: a renamed distribution or a dropped extra fails here,
not on a user's machine."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# pip install / pipx install and what follows up to the end of a code span or line
INSTALL = re.compile(r"\bpipx? install\s+(?P<args>[^`\n#]+)")
# a requirement: NAME or NAME[extra,extra], quoted or not; paths ('./[agent]') name no distribution
REQUIREMENT = re.compile(
    r"""^['"]?(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[(?P<extras>[^\]]*)\])?['"]?$""")
PATH_REQUIREMENT = re.compile(r"""^['"]?(\.{1,2}/|/)[^\[]*(\[(?P<extras>[^\]]*)\])?['"]?$""")
# packages the docs install for a reason of their own (not this project)
OTHERS = {"pillow", "pycuda", "tensorrt", "tritonclient"}


def _project() -> tuple[str, set[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["name"], set(data["project"]["optional-dependencies"])


def _install_lines() -> list[tuple[str, int, str]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            out += [(doc.name, n, m["args"]) for m in INSTALL.finditer(line)]
    return out


def test_install_lines_name_this_distribution_and_its_extras() -> None:
    name, extras = _project()
    lines = _install_lines()
    assert any(name in args for _, _, args in lines), f"no install line names {name}"
    wrong = []
    for doc, n, args in lines:
        for word in args.split():
            if word.startswith("-"):
                continue
            if m := PATH_REQUIREMENT.match(word):
                named = None
            elif m := REQUIREMENT.match(word):
                named = m["name"]
            else:
                continue
            if named is not None and named.lower() in OTHERS:
                continue
            if named is not None and named != name:
                wrong.append(f"{doc}:{n}: {word} (the distribution is {name})")
            unknown = {e.strip() for e in (m["extras"] or "").split(",") if e.strip()} - extras
            if unknown:
                wrong.append(f"{doc}:{n}: {word}: no extra {sorted(unknown)} in pyproject.toml")
    assert not wrong, "\n".join(wrong)
