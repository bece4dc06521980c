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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress


@contextmanager
def write_transaction(conn: sqlite3.Connection, lock: threading.RLock, *,
                      wrap: Callable[[sqlite3.Error], Exception] | None = None,
                      ) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under ``lock``; rolled back when the body raises.

    IMMEDIATE takes the write lock at once, so a second writer waits (``busy_timeout``)
    instead of failing when it upgrades a read lock. A database error anywhere (disk full, a
    read-only file system, I/O) rolls back whatever is open, so the connection stays usable;
    ``wrap`` turns it into the caller's own error (chained to the sqlite3 one).
    """
    with lock:
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if wrap is None:
                raise
            raise wrap(exc) from exc
