"""docs/threads.md keeps up with the code: every module that creates a thread, a pool, a lock, a
thread-local, a Textual worker or a child process is listed there, and every module it names
exists (a move updates the page)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("packager", "edge_agent", "console")
DOC = ROOT / "docs" / "threads.md"
# what a call creates that docs/threads.md must list (threading's, concurrent.futures',
# subprocess', asyncio's and Textual's names)
CREATORS = {"Thread", "Timer", "Lock", "RLock", "Condition", "Event", "Semaphore",
            "BoundedSemaphore", "local", "ThreadPoolExecutor", "ProcessPoolExecutor", "Popen",
            "new_event_loop", "work", "run_worker"}


def _creates(tree: ast.AST) -> list[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found |= {b.attr for b in node.bases
                      if isinstance(b, ast.Attribute) and b.attr == "ThreadingMixIn"}
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in CREATORS:
            found.add(name)
        elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
              and func.value.id == "subprocess" and func.attr == "run"):
            found.add("subprocess.run")
    return sorted(found)


def test_every_module_that_creates_a_thread_or_lock_is_listed() -> None:
    doc = DOC.read_text(encoding="utf-8")
    seen, missing = 0, []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "generated" in path.parts:
                continue
            creates = _creates(ast.parse(path.read_text(encoding="utf-8"), str(path)))
            if not creates:
                continue
            seen += 1
            rel = path.relative_to(ROOT).as_posix()
            if f"`{rel}" not in doc:
                missing.append(f"{rel}: {', '.join(creates)}")
    assert seen > 30  # the scan sees the real creators (batcher, servers, console workers...)
    assert missing == [], ("add these to docs/threads.md (what, created by, owner, lifetime, "
                           "what it guards):\n" + "\n".join(missing))


def test_every_module_the_page_names_exists() -> None:
    cited = set(re.findall(r"`((?:edge_agent|console|packager)/[\w/]+\.py)", DOC.read_text(
        encoding="utf-8")))
    assert len(cited) > 30
    assert sorted(p for p in cited if not (ROOT / p).is_file()) == []
