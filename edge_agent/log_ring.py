"""The agent's recent log lines in memory: a bounded ring that the management API streams.

``edge-console logs`` and the console's log view read it, so an operator sees why a deploy
failed without a shell on the device. The ring is a :class:`logging.Handler` on the root logger:
every record the agent logs at or above its level lands here too (journald still gets them from
stderr). Memory is bounded by ``capacity`` lines of at most ``MAX_MESSAGE`` characters each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

MAX_MESSAGE = 2000  # characters kept of one formatted record (tracebacks included)
DEFAULT_CAPACITY = 2000

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True, slots=True)
class RingEntry:
    """One log record as kept: ``seq`` increases by one per record since the agent started."""

    seq: int
    ts: float
    level: str
    logger: str
    message: str


def level_number(name: str) -> int:
    """``"warning"`` -> 30; ``""`` -> 0 (everything). ValueError names the accepted levels."""
    if not name:
        return 0
    upper = name.strip().upper()
    if upper == "WARN":
        upper = "WARNING"
    if upper not in LEVELS:
        raise ValueError(f"unknown log level {name!r}; use one of {', '.join(LEVELS).lower()}")
    return int(logging.getLevelName(upper))


class LogRing(logging.Handler):
    """Keeps the last ``capacity`` records; readers take a tail and wait for newer ones."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        super().__init__()
        if capacity < 1:
            raise ValueError("a log ring needs room for at least one line")
        self._lines: deque[RingEntry] = deque(maxlen=capacity)
        self._seq = 0
        self._cond = threading.Condition()
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a bad format string must not lose the line or raise in the caller
            text = str(record.msg)
        if len(text) > MAX_MESSAGE:
            text = text[:MAX_MESSAGE - 1] + "…"
        with self._cond:
            self._seq += 1
            self._lines.append(RingEntry(self._seq, record.created, record.levelname,
                                       record.name, text))
            self._cond.notify_all()

    def tail(self, count: int, min_level: int = 0) -> tuple[list[RingEntry], int]:
        """The newest ``count`` lines at or above ``min_level``, oldest first, and the cursor
        for :meth:`after`."""
        with self._cond:
            lines = [ln for ln in self._lines if _num(ln.level) >= min_level]
            cursor = self._seq
        return (lines[-count:] if count > 0 else []), cursor

    def after(self, seq: int, min_level: int = 0,
              timeout: float = 0.5) -> tuple[list[RingEntry], int]:
        """Lines newer than ``seq`` at or above ``min_level`` (waits up to ``timeout`` s for any
        line), and the cursor to pass next time (lines below the level move it too)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._seq <= seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    return [], seq
                self._cond.wait(left)
            lines = [ln for ln in self._lines if ln.seq > seq and _num(ln.level) >= min_level]
            return lines, self._seq

    @property
    def last_seq(self) -> int:
        """The sequence number of the newest line (0: none yet)."""
        with self._cond:
            return self._seq


def _num(level: str) -> int:
    value = logging.getLevelName(level)
    return value if isinstance(value, int) else 0


_installed: LogRing | None = None
_install_lock = threading.Lock()


def install(capacity: int = DEFAULT_CAPACITY) -> LogRing:
    """The process's ring, attached to the root logger on first call (idempotent)."""
    global _installed
    with _install_lock:
        if _installed is None:
            _installed = LogRing(capacity)
            logging.getLogger().addHandler(_installed)
        return _installed
