"""Looking at child processes that may exit (or linger as zombies) while a test reads them."""

from __future__ import annotations

import psutil


def command_line(process: psutil.Process) -> list[str]:
    """``process``'s command line; empty for one that is gone or a zombie (earlier tests in
    the same pytest process leave exited children behind until they are reaped)."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []
