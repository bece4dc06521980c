"""A resident-memory limit for a runtime process and the processes it started.

The kernel counts resident memory, so that is what is bounded: a watcher thread samples the
process group's RSS (the runtime process leads a group of its own) every ``period_s`` and, over
the limit, kills the whole group. A fast allocator can overshoot by what it touches in one
period; ``RLIMIT_AS`` was not used because runtimes reserve far more address space than they
touch (OpenVINO and ONNX Runtime map gigabytes for a small model), so an address-space limit
near the budget refuses loads that would fit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

import psutil

log = logging.getLogger(__name__)

PERIOD_S = 0.2


def group_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every process below it (0 once it is gone)."""
    try:
        leader = psutil.Process(pid)
        total = leader.memory_info().rss
        for child in leader.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += child.memory_info().rss
        return total
    except psutil.Error:
        return 0


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (the process and whatever it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def watch(pid: int, limit_bytes: int, on_exceeded: Callable[[int], None],
          stop: threading.Event, *, period_s: float = PERIOD_S, name: str = "") -> None:
    """Start a daemon thread: while ``pid`` lives and ``stop`` is clear, sample its group's RSS;
    over ``limit_bytes``, call ``on_exceeded(rss)`` once and kill the group."""
    if limit_bytes <= 0:
        return

    def run() -> None:
        while not stop.wait(period_s):
            rss = group_rss(pid)
            if rss == 0:
                return
            if rss > limit_bytes:
                on_exceeded(rss)
                kill_group(pid)
                return

    threading.Thread(target=run, daemon=True, name=f"memory-watch-{name or pid}").start()
