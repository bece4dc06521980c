"""The three command lines' behaviour when the reader of their output goes away
(``edge-pack inspect --json | head``): no traceback, no "Broken pipe" message; exit 141, the
status a command killed by SIGPIPE has (what ``set -o pipefail`` reports for ``cat``)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")

BROKEN_PIPE_EXIT = 141
"""128 + SIGPIPE: the exit status of a command whose output pipe was closed."""


def quiet_on_broken_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """Wrap a command's ``main``: its output flushed before it returns, and a closed stdout
    ends it quietly with :data:`BROKEN_PIPE_EXIT` (Python's recipe: devnull over stdout, so
    the interpreter's last flush has somewhere to go). rich's consoles handle a closed pipe
    themselves (devnull over stdout, then exit 1); that exit becomes 141 too."""

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        was_devnull = _stdout_is_devnull()
        try:
            try:
                code = main(*args, **kwargs)
            except SystemExit as exc:  # argparse's --help and usage errors, rich, sys.exit
                if exc.code == 1 and not was_devnull and _stdout_is_devnull():
                    return BROKEN_PIPE_EXIT  # rich's Console.on_broken_pipe did it
                sys.stdout.flush()
                raise
            sys.stdout.flush()
            return code
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, sys.stdout.fileno())
            finally:
                os.close(devnull)
            return BROKEN_PIPE_EXIT

    return run


def _stdout_is_devnull() -> bool:
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (OSError, ValueError):  # no stdout (closed, or replaced by an object without fd)
        return False
