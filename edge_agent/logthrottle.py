"""A small rate limiter for repeated log lines: a flood of bad calls must not flood the journal.

``LogThrottle(log).warning("undecodable", "...%s", arg)`` logs at most ``burst`` lines per key
per ``interval_s``; the lines it drops are counted and reported by the next line it logs.
"""

from __future__ import annotations

import logging
import threading
import time

MAX_KEYS = 1024
"""Distinct keys remembered at most (memory stays bounded whatever the keys are)."""


class LogThrottle:
    """Rate-limits log lines per key (thread-safe)."""

    def __init__(self, logger: logging.Logger, *, interval_s: float = 10.0,
                 burst: int = 5) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.burst = burst
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[float, int, int]] = {}  # key -> (start, logged, dropped)
        self.suppressed = 0  # lines dropped so far, over every key

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``key`` used up its lines this interval; True if logged."""
        now = time.monotonic()
        with self._lock:
            start, logged, dropped = self._windows.get(key, (now, 0, 0))
            if now - start >= self.interval_s:
                start, logged = now, 0
            if logged >= self.burst:
                self._windows[key] = (start, logged, dropped + 1)
                self.suppressed += 1
                return False
            if key not in self._windows and len(self._windows) >= MAX_KEYS:
                self._windows.pop(next(iter(self._windows)))
            self._windows[key] = (start, logged + 1, 0)
        if dropped:
            msg += " (%d similar lines suppressed)"
            args = (*args, dropped)
        self.logger.log(level, msg, *args)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        """:meth:`log` at WARNING."""
        return self.log(logging.WARNING, key, msg, *args)
