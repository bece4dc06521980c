"""The one SQLite write transaction of the agent's databases (state.db and metrics.db).

Both stores keep one connection in autocommit mode (``isolation_level=None``) behind an
``RLock`` and write through :func:`write_transaction`::

    with write_transaction(self._conn, self._lock) as c:
        c.execute("UPDATE ...")
        c.execute("INSERT ...")   # both or neither
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def write_transaction(conn: sqlite3.Connection,
                      lock: threading.RLock) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under ``lock``; rolled back when the body raises.

    IMMEDIATE takes the write lock at once, so a second writer waits (``busy_timeout``)
    instead of failing when it upgrades a read lock.
    """
    with lock:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
