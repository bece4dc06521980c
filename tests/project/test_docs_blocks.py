"""Every shell block of README.md and docs/*.md runs, as written, in order.

One test per Markdown file with ```bash or ```sh blocks. The blocks are read by
pytest-codeblocks (``extract_from_file``: it knows the ``<!--pytest.mark.skip(reason="...")-->``
and ``<!--pytest-codeblocks:cont-->`` markers) and run one after the other in ONE bash process,
as a user pastes them into one terminal: variables, ``cd`` and background jobs (``edge-agent
serve ... &``) carry from block to block. Each block runs with ``set -e`` and stdin from
/dev/null; a failing command fails the test, naming the block's line and its output.

Where: a fresh copy of the repository's files (what a clone holds, with this checkout's edits)
in a temporary directory, with ``.venv`` there linking to the environment running the tests
(what ``./scripts/test.sh`` installs, so ``source .venv/bin/activate`` works), its ``bin`` first
on PATH, a private ``HOME``, and ``$EDGE_REPO`` naming the checkout. PYTHONPATH is passed
through. As root the session runs in a private network namespace (``unshare --net``, loopback
only), so the fixed ports the docs use (127.0.0.1:8001, :50051, ...) cannot collide with
anything else on the machine and no mDNS packet leaves it; not as root, it runs in the
machine's namespace (the ports must then be free). At the end the session's whole process
group is stopped (every agent or registry a block started in the background).

A block is skipped only with a reason: hardware or a system the machine lacks (a Jetson, a
GPU, systemd as PID 1, Docker, an interactive terminal for the console's UI), or the test
command itself (``.ci/run`` runs ``./scripts/demo.sh`` and ``./scripts/test.sh``).
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_codeblocks import extract_from_file

ROOT = Path(__file__).resolve().parents[2]
SHELLS = {"bash", "sh"}
BLOCK_DEADLINE_S = 900.0  # a block that runs a benchmark or a tuning run on a busy machine
STOP_DEADLINE_S = 30.0
SKIP_MARK = re.compile(r'^pytest\.mark\.skip\(reason=(["\'])(?P<reason>.+)\1\)$')


@dataclass(frozen=True)
class Block:
    """One shell block: where it starts in its file, its code, and why it is skipped (if so)."""

    lineno: int
    code: str
    skip_reason: str | None


def shell_blocks(doc: Path) -> list[Block]:
    """The ```bash/```sh blocks of ``doc``, in order, with their skip reasons."""
    out = []
    for b in extract_from_file(doc):
        syntax = (b.syntax or "").split()
        if not syntax or syntax[0] not in SHELLS:
            continue
        reason = None
        for mark in b.marks:
            m = SKIP_MARK.match(mark.strip())
            assert m, (f"{doc.name}:{b.lineno}: only pytest.mark.skip(reason=\"...\") is "
                       f"understood here, not {mark!r}")
            reason = m["reason"]
        out.append(Block(b.lineno, b.code, reason))
    return out


def _docs() -> list[Path]:
    """The Markdown files with at least one shell block to run."""
    return [f for f in _markdown() if any(b.skip_reason is None for b in shell_blocks(f))]


def _markdown() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def fresh_copy(dest: Path) -> None:
    """Copy the files a clone of this checkout would hold (plus uncommitted edits) to dest."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    for rel in listed.stdout.decode().split("\0"):
        src = ROOT / rel
        if not rel or not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def _private_network() -> list[str]:
    """The command prefix that runs bash in a loopback-only network namespace, when root."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return []
    probe = subprocess.run(["unshare", "--net", "ip", "link", "set", "lo", "up"],
                           capture_output=True, check=False)
    return ["unshare", "--net"] if probe.returncode == 0 else []


class Session:
    """One bash process that runs blocks one after the other, as one terminal would."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.sentinel = f"__edge_docs_block_done_{secrets.token_hex(8)}__"
        self.scripts = cwd.parent / "blocks"
        self.scripts.mkdir()
        prefix = _private_network()
        init = "ip link set lo up && " if prefix else ""
        self.proc = subprocess.Popen(
            [*prefix, "bash", "--noprofile", "--norc", "-c", f"{init}exec bash --noprofile "
             "--norc -s"], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, text=True, bufsize=1)
        self.isolated = bool(prefix)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, n: int, code: str) -> tuple[bool, str]:
        """Run one block; (True, output) when every command in it succeeded."""
        script = self.scripts / f"block{n}.sh"
        script.write_text(code)
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"set -e; source {script} </dev/null; set +e; "
                              f"echo {self.sentinel}\n")
        self.proc.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + BLOCK_DEADLINE_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:  # set -e ended the shell: a command failed
                return False, "".join(out) + f"[bash exited with {self.proc.wait()}]\n"
            if line.rstrip("\n") == self.sentinel:
                return True, "".join(out)
            out.append(line)
        return False, "".join(out) + f"[still running after {BLOCK_DEADLINE_S:.0f} s]\n"

    def stop(self) -> None:
        """Stop bash and everything it started (its whole process group)."""
        for sig, wait_s in ((signal.SIGTERM, STOP_DEADLINE_S), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait_s
            while time.monotonic() < end and _group_alive(self.proc.pid):
                self.proc.poll()
                time.sleep(0.2)
            if not _group_alive(self.proc.pid):
                break
        self.proc.wait(timeout=10)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie leader still counts; only live members matter
    return any(_pgid_of(p) == pgid and not _zombie(p) for p in Path("/proc").iterdir()
               if p.name.isdigit())


def _pgid_of(proc_dir: Path) -> int | None:
    try:
        return int(proc_dir.joinpath("stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def _zombie(proc_dir: Path) -> bool:
    try:
        return proc_dir.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _log_tails(work: Path, lines: int = 30) -> str:
    """The last lines of the *.log files the blocks wrote (agents and registries in the
    background write there), for a failure message."""
    out = []
    for log in sorted(work.glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"\n--- {log.name} (last {len(tail)} lines) ---\n" + "\n".join(tail))
    return "".join(out)


def session_env(home: Path) -> dict[str, str]:
    """The session's environment: the tests' environment's commands first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTEST_ADDOPTS")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env.pop("XDG_CONFIG_HOME", None)
    env["EDGE_REPO"] = str(ROOT)
    return env


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.name)
def test_shell_blocks_run_in_order(doc: Path, tmp_path: Path) -> None:
    """Each block of ``doc`` succeeds, run in order in one shell in a fresh copy of the repo."""
    blocks = shell_blocks(doc)
    work = tmp_path / "repo"
    fresh_copy(work)
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    (tmp_path / "home").mkdir()
    session = Session(work, session_env(tmp_path / "home"))
    try:
        for n, block in enumerate(blocks):
            if block.skip_reason is not None:
                continue
            ok, output = session.run(n, block.code)
            if not ok:
                pytest.fail(f"{doc.name}, the block at line {block.lineno} failed (earlier "
                            f"blocks ran first, in one shell, in a copy of the repo):\n"
                            f"{block.code}\n--- its output ---\n{output[-6000:]}"
                            f"{_log_tails(work)}", pytrace=False)
    finally:
        session.stop()


def test_skipped_blocks_say_why() -> None:
    """A skipped block names hardware or a system the machine lacks (a Jetson, a GPU, systemd,
    root, Docker, an interactive terminal), or is the test command itself."""
    allowed = re.compile(r"Jetson|GPU|TensorRT|systemd|root|Docker|interactive terminal|"
                         r"the test command itself", re.I)
    for doc in _markdown():
        for b in shell_blocks(doc):
            if b.skip_reason is not None:
                assert allowed.search(b.skip_reason), (
                    f"{doc.name}:{b.lineno}: skipped for {b.skip_reason!r}; only hardware "
                    "or a system the machine lacks, or the test command itself, are reasons")


def test_every_fenced_block_names_its_language() -> None:
    """Untagged ``` blocks hide shell commands from the run above: each block names a language
    (```bash for commands, ```text for output)."""
    for doc in _markdown():
        untagged = [b.lineno for b in extract_from_file(doc) if not (b.syntax or "").strip()]
        assert not untagged, f"{doc.name}: blocks with no language at lines {untagged}"
