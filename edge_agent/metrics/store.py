"""The metrics database: per-second rows, minute rollups, retention, a size cap, and queries.

Table ``samples`` holds one row per model, version and second (``res`` = 1) with counters and
three latency histograms (queue, compute, total) as sparse blobs (see :mod:`histogram`); rows
older than ``rollup_after_s`` become one row per minute (``res`` = 60) with merged histograms, so
percentiles over old data stay meaningful. Table ``system`` holds device samples the same way.
The database runs in WAL mode with incremental auto-vacuum so the size cap can shrink the file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.errors import StateStoreError
from edge_agent.metrics import histogram as hist
from edge_agent.metrics.system import SystemSample
from edge_agent.sqlite_tx import write_transaction

log = logging.getLogger(__name__)

DB_NAME = "metrics.db"
CHECK_FILE_EVERY_S = 2.0
"""How often :meth:`MetricsStore.write` checks that its file is still the one it opened."""
DAY_S = 86_400
_COUNTERS = ("requests", "errors", "rows", "batches", "batch_rows", "queue_ns_sum",
             "compute_ns_sum", "total_ns_sum", "cache_hits")
_ADDED_COUNTERS = ("cache_hits",)  # columns newer than the first schema: added on open
_HISTS = ("h_queue", "h_compute", "h_total")
_SAMPLE_COLS = ("model", "version", "ts", "res", *_COUNTERS, *_HISTS)
_SYSTEM_COLS = ("ts", "res", "cpu_percent", "mem_percent", "rss_bytes", "temp_c",
                "disk_free_bytes")
# Same-key rows (two flushes in one second, or a re-run rollup) merge: counters add, and the
# sparse histogram blobs concatenate (decoding sums repeated buckets).
_UPSERT_SAMPLE = (
    f"INSERT INTO samples ({', '.join(_SAMPLE_COLS)}) VALUES ({', '.join('?' * len(_SAMPLE_COLS))})"
    " ON CONFLICT (model, ts, version, res) DO UPDATE SET "
    + ", ".join(f"{c} = {c} + excluded.{c}" for c in _COUNTERS) + ", "
    + ", ".join(f"{h} = CAST(COALESCE({h}, X'') || COALESCE(excluded.{h}, X'') AS BLOB)"
                for h in _HISTS))
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS samples (model TEXT NOT NULL, "
    + ", ".join(f"{c} INTEGER NOT NULL" for c in ("version", "ts", "res", *_COUNTERS)) + ", "
    + ", ".join(f"{h} BLOB" for h in _HISTS)
    + ", PRIMARY KEY (model, ts, version, res))",
    "CREATE INDEX IF NOT EXISTS idx_samples_res_ts ON samples (res, ts)",
    "CREATE TABLE IF NOT EXISTS system (ts INTEGER, res INTEGER, cpu_percent REAL, "
    "mem_percent REAL, rss_bytes INTEGER, temp_c REAL, disk_free_bytes INTEGER, "
    "PRIMARY KEY (ts, res))",
)
_UPSERT_SYSTEM = (
    f"INSERT OR REPLACE INTO system ({', '.join(_SYSTEM_COLS)}) "
    f"VALUES ({', '.join('?' * len(_SYSTEM_COLS))})")


@dataclass(slots=True)
class SecondRow:
    """Counters and histograms of one model version over one interval (what the recorder flushes).

    Histograms are lists of :data:`histogram.NUM_BUCKETS` counts of nanosecond durations.
    """

    model: str
    version: int
    requests: int
    errors: int
    rows: int
    batches: int
    batch_rows: int
    queue_ns_sum: int
    compute_ns_sum: int
    total_ns_sum: int
    h_queue: list[int]
    h_compute: list[int]
    h_total: list[int]
    cache_hits: int = 0  # requests answered from the response cache (counted in requests too)


@dataclass(frozen=True, slots=True)
class StoredMetricPoint:
    """Metrics of one model (one version, or all when ``version`` is None) over one step.

    Latencies are in milliseconds, None when there were no requests.
    """

    ts: int
    step_s: int
    model: str
    version: int | None
    requests: int
    errors: int
    rows: int
    batches: int
    requests_per_s: float
    error_rate: float
    mean_batch: float | None
    mean_queue_ms: float | None
    mean_compute_ms: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    queue_p99_ms: float | None
    cache_hits: int = 0
    cache_hit_rate: float | None = None  # of all requests; None when there were none


@dataclass(frozen=True, slots=True)
class StoredSystemPoint:
    """Averaged system samples over one step (``temp_c`` None where not reported)."""

    ts: int
    step_s: int
    cpu_percent: float
    mem_percent: float
    rss_bytes: int
    temp_c: float | None
    disk_free_bytes: int


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    """What one :meth:`MetricsStore.maintain` pass did."""

    rolled_up_rows: int
    expired_rows: int
    capped_rows: int
    size_bytes_before: int
    size_bytes_after: int


def make_point(ts: int, step_s: int, model: str, version: int | None, c: dict[str, int],
               h_queue: list[int], h_total: list[int]) -> StoredMetricPoint:
    """A :class:`StoredMetricPoint` from summed counters and merged histograms."""
    req = c["requests"]

    def ms(ns: float | None) -> float | None:
        return None if ns is None else ns / 1e6

    return StoredMetricPoint(
        ts=ts, step_s=step_s, model=model, version=version, requests=req, errors=c["errors"],
        rows=c["rows"], batches=c["batches"], requests_per_s=req / step_s,
        error_rate=c["errors"] / req if req else 0.0,
        mean_batch=c["batch_rows"] / c["batches"] if c["batches"] else None,
        mean_queue_ms=ms(c["queue_ns_sum"] / req) if req else None,
        mean_compute_ms=ms(c["compute_ns_sum"] / req) if req else None,
        p50_ms=ms(hist.percentile(h_total, 0.50)), p95_ms=ms(hist.percentile(h_total, 0.95)),
        p99_ms=ms(hist.percentile(h_total, 0.99)),
        queue_p99_ms=ms(hist.percentile(h_queue, 0.99)),
        cache_hits=c.get("cache_hits", 0), cache_hit_rate=c.get("cache_hits", 0) / req
        if req else None)


class MetricsStore:
    """SQLite-backed metrics history in ``path``. Thread-safe (one serialized connection).

    ``retention_s``: rows older than this are deleted. ``rollup_after_s``: per-second rows older
    than this become per-minute rows. ``max_bytes``: the database's used pages are kept under
    this by deleting the oldest rows and running an incremental vacuum. ``readonly`` opens an
    existing database for queries only (the CLI reading a running agent's metrics).
    """

    def __init__(self, path: str | os.PathLike[str], *, retention_s: int = 30 * DAY_S,
                 rollup_after_s: int = DAY_S, max_bytes: int = 256 * 1024 * 1024,
                 readonly: bool = False) -> None:
        self.path = Path(path)
        self.retention_s = retention_s
        self.rollup_after_s = rollup_after_s
        self.max_bytes = max_bytes
        self.readonly = readonly
        self._lock = threading.RLock()
        self._identity: tuple[int, int] | None = None
        self._next_check = 0.0
        self._connect()

    def _connect(self) -> None:
        try:
            if self.readonly:
                if not self.path.exists():
                    raise StateStoreError(f"there is no metrics database at {self.path}; is the "
                                          "agent's state directory right?")
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       check_same_thread=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=5000")
            self._conn = conn
            if not self.readonly:
                self._setup()
            self._identity = self._file_identity()
            have = {row[1] for row in conn.execute("PRAGMA table_info(samples)")}
            # an older agent's database read read-only: its missing counters read as 0
            self._missing = {c for c in _ADDED_COUNTERS if have and c not in have}
        except sqlite3.DatabaseError as exc:
            raise StateStoreError(
                f"cannot open the metrics database {self.path}: {exc}; it holds only history, "
                "so deleting it (with the agent stopped) is safe") from exc

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def check_file(self, *, force: bool = False) -> bool:
        """Reopen the database if its file was removed or replaced since it was opened (the
        writer would otherwise keep writing to a deleted file); returns True if it reopened.

        Checks at most every :data:`CHECK_FILE_EVERY_S` unless ``force``."""
        if self.readonly:
            return False
        now = time.monotonic()
        if not force and now < self._next_check:
            return False
        self._next_check = now + CHECK_FILE_EVERY_S
        seen = self._file_identity()
        if seen is not None and seen == self._identity:
            return False
        with self._lock:
            log.warning("the metrics database %s was %s while the agent ran; starting a new "
                        "one there (the history it held is gone)", self.path,
                        "removed" if seen is None else "replaced")
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()  # checkpoints into the old file and drops its -wal/-shm
            self._connect()
        return True

    def _sums(self) -> str:
        return ", ".join("0" if n in self._missing else f"SUM({n})" for n in _COUNTERS)

    @classmethod
    def open(cls, state_dir: str | os.PathLike[str], **kwargs: Any) -> MetricsStore:
        """Open ``<state_dir>/metrics.db`` (keyword arguments as for the constructor)."""
        return cls(Path(state_dir) / DB_NAME, **kwargs)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> MetricsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _setup(self) -> None:
        c = self._conn
        # auto_vacuum must be chosen before the first table exists.
        if c.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] == 0:
            c.execute("PRAGMA auto_vacuum=INCREMENTAL")
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")  # history: losing the last second is fine
        c.execute("PRAGMA journal_size_limit=4194304")
        with write_transaction(c, self._lock):
            for statement in _SCHEMA:
                c.execute(statement)
            have = {row[1] for row in c.execute("PRAGMA table_info(samples)")}
            for column in _ADDED_COUNTERS:
                if column not in have:  # a database written by an older agent
                    c.execute(f"ALTER TABLE samples ADD COLUMN {column} INTEGER NOT NULL "
                              "DEFAULT 0")

    # -- writing -------------------------------------------------------------------------------

    def write(self, ts: int, rows: Iterable[SecondRow], system: SystemSample | None = None,
              res: int = 1) -> int:
        """Store one interval's rows (merging with rows already at ``ts``); returns the count."""
        self.check_file()
        params = [(r.model, r.version, ts, res, r.requests, r.errors, r.rows, r.batches,
                   r.batch_rows, r.queue_ns_sum, r.compute_ns_sum, r.total_ns_sum, r.cache_hits,
                   hist.encode(r.h_queue) or None, hist.encode(r.h_compute) or None,
                   hist.encode(r.h_total) or None) for r in rows]
        with write_transaction(self._conn, self._lock) as c:
            if params:
                c.executemany(_UPSERT_SAMPLE, params)
            if system is not None:
                c.execute(_UPSERT_SYSTEM, (ts, res, system.cpu_percent, system.mem_percent,
                                           system.rss_bytes, system.temp_c,
                                           system.disk_free_bytes))
        return len(params)

    # -- maintenance ---------------------------------------------------------------------------

    def maintain(self, now: float | None = None) -> MaintenanceReport:
        """Roll up old per-second rows, delete expired rows, and enforce the size cap."""
        now = time.time() if now is None else now
        with self._lock:
            before = self.size_bytes()
            rolled = self._rollup(int(now) - self.rollup_after_s)
            cutoff = int(now) - self.retention_s
            expired = self._delete_before(cutoff)
            capped = self._enforce_cap()
            if rolled or expired or capped:
                # executescript steps the pragma to completion; execute() frees only one page.
                self._conn.executescript("PRAGMA incremental_vacuum;")
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return MaintenanceReport(rolled, expired, capped, before, self.size_bytes())

    def _rollup(self, before_ts: int) -> int:
        cutoff = before_ts - before_ts % 60  # whole minutes only
        c = self._conn
        sums = ", ".join(f"SUM({n})" for n in _COUNTERS)
        blobs = ", ".join(f"CAST(group_concat({h}, '') AS BLOB)" for h in _HISTS)
        with write_transaction(c, self._lock):
            n = c.execute("SELECT COUNT(*) FROM samples WHERE res = 1 AND ts < ?",
                          (cutoff,)).fetchone()[0]
            if n:
                groups = c.execute(
                    f"SELECT model, version, (ts / 60) * 60 AS m, {sums}, {blobs} FROM samples "
                    "WHERE res = 1 AND ts < ? GROUP BY model, version, m", (cutoff,)).fetchall()
                params = [(g[0], g[1], g[2], 60, *g[3:3 + len(_COUNTERS)],
                           *(hist.encode(hist.decode(b)) or None
                             for b in g[3 + len(_COUNTERS):])) for g in groups]
                c.executemany(_UPSERT_SAMPLE, params)
                c.execute("DELETE FROM samples WHERE res = 1 AND ts < ?", (cutoff,))
                sys_avgs = c.execute(
                    "SELECT (ts / 60) * 60 AS m, AVG(cpu_percent), AVG(mem_percent), "
                    "CAST(AVG(rss_bytes) AS INTEGER), AVG(temp_c), MIN(disk_free_bytes) "
                    "FROM system WHERE res = 1 AND ts < ? GROUP BY m", (cutoff,)).fetchall()
                c.executemany(_UPSERT_SYSTEM, [(g[0], 60, *g[1:]) for g in sys_avgs])
                c.execute("DELETE FROM system WHERE res = 1 AND ts < ?", (cutoff,))
        return int(n)

    def _delete_before(self, ts: int) -> int:
        c = self._conn
        n = c.execute("DELETE FROM samples WHERE ts < ?", (ts,)).rowcount
        c.execute("DELETE FROM system WHERE ts < ?", (ts,))
        return max(n, 0)

    def used_bytes(self) -> int:
        """Bytes of the database's pages in use (file size minus free pages)."""
        c = self._conn
        page = c.execute("PRAGMA page_size").fetchone()[0]
        count = c.execute("PRAGMA page_count").fetchone()[0]
        free = c.execute("PRAGMA freelist_count").fetchone()[0]
        return int((count - free) * page)

    def size_bytes(self) -> int:
        """Bytes on disk: the database file plus its WAL."""
        total = 0
        for p in (self.path, self.path.with_name(self.path.name + "-wal")):
            with contextlib.suppress(FileNotFoundError):
                total += p.stat().st_size
        return total

    def _enforce_cap(self) -> int:
        """Delete the oldest rows until the used pages fit in 90% of ``max_bytes``."""
        c = self._conn
        deleted = 0
        for _ in range(8):
            used = self.used_bytes()
            if used <= self.max_bytes:
                break
            total = c.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
            if total == 0:
                break
            drop = max(1, int(total * (1 - 0.9 * self.max_bytes / used)))
            row = c.execute("SELECT ts FROM samples ORDER BY ts LIMIT 1 OFFSET ?",
                            (min(drop, total - 1),)).fetchone()
            cut = row[0] if drop < total else row[0] + 1
            n = c.execute("DELETE FROM samples WHERE ts < ?", (cut,)).rowcount
            if n <= 0:  # many rows share the oldest second
                n = c.execute("DELETE FROM samples WHERE ts <= ?", (cut,)).rowcount
                cut += 1
            c.execute("DELETE FROM system WHERE ts < ?", (cut,))
            deleted += max(n, 0)
        return deleted

    # -- queries -------------------------------------------------------------------------------

    def query(self, model: str, start: float, end: float, step_s: int = 60,
              version: int | None = None) -> list[StoredMetricPoint]:
        """Metrics of ``model`` in ``[start, end)`` rolled up into ``step_s`` buckets.

        ``version`` None merges all versions. The step is raised to the coarsest stored
        resolution in the range (60 s for rolled-up history). Empty buckets are omitted.
        """
        where = "model = ? AND ts >= ? AND ts < ?" + (" AND version = ?" if version is not None
                                                      else "")
        args: tuple[object, ...] = (model, int(start), int(end),
                                    *(() if version is None else (version,)))
        with self._lock:
            coarsest = self._conn.execute(f"SELECT MAX(res) FROM samples WHERE {where}",
                                          args).fetchone()[0]
            if coarsest is None:
                return []
            step = max(int(step_s), int(coarsest), 1)
            sums = self._sums()
            rows = self._conn.execute(
                f"SELECT (ts / {step}) * {step} AS b, {sums}, "
                "CAST(group_concat(h_queue, '') AS BLOB), CAST(group_concat(h_total, '') AS BLOB) "
                f"FROM samples WHERE {where} GROUP BY b ORDER BY b", args).fetchall()
        k = len(_COUNTERS)
        return [make_point(r[0], step, model, version, dict(zip(_COUNTERS, r[1:1 + k],
                                                                 strict=True)),
                           hist.decode(r[1 + k]), hist.decode(r[2 + k])) for r in rows]

    def latest(self, model: str | None = None, within_s: int = 10,
               now: float | None = None) -> list[StoredMetricPoint]:
        """The newest per-second row of each model version seen in the last ``within_s``."""
        now = time.time() if now is None else now
        where = "res = 1 AND ts >= ?"
        args: list[int | str] = [int(now) - within_s]
        if model is not None:
            where += " AND model = ?"
            args.append(model)
        cols = ", ".join("0" if n in self._missing else n for n in _COUNTERS)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT model, version, ts, {cols}, h_queue, h_total FROM samples s "
                f"WHERE {where} AND ts = (SELECT MAX(ts) FROM samples WHERE res = 1 AND "
                "model = s.model AND version = s.version) ORDER BY model, version",
                args).fetchall()
        k = len(_COUNTERS)
        return [make_point(r[2], 1, r[0], r[1], dict(zip(_COUNTERS, r[3:3 + k], strict=True)),
                           hist.decode(r[3 + k]), hist.decode(r[4 + k])) for r in rows]

    def summary(self, window_s: int = 60, now: float | None = None) -> list[StoredMetricPoint]:
        """One point per model version over the last ``window_s`` seconds (for the CLI)."""
        now = time.time() if now is None else now
        start = int(now) - window_s
        sums = self._sums()
        with self._lock:
            rows = self._conn.execute(
                f"SELECT model, version, {sums}, CAST(group_concat(h_queue, '') AS BLOB), "
                "CAST(group_concat(h_total, '') AS BLOB) FROM samples WHERE ts >= ? AND ts < ? "
                "GROUP BY model, version ORDER BY model, version",
                (start, start + window_s)).fetchall()
        k = len(_COUNTERS)
        return [make_point(start, window_s, r[0], r[1], dict(zip(_COUNTERS, r[2:2 + k],
                                                                  strict=True)),
                           hist.decode(r[2 + k]), hist.decode(r[3 + k])) for r in rows]

    def system(self, start: float, end: float, step_s: int = 60) -> list[StoredSystemPoint]:
        """System samples in ``[start, end)`` averaged into ``step_s`` buckets."""
        with self._lock:
            coarsest = self._conn.execute("SELECT MAX(res) FROM system WHERE ts >= ? AND ts < ?",
                                          (int(start), int(end))).fetchone()[0]
            if coarsest is None:
                return []
            step = max(int(step_s), int(coarsest), 1)
            rows = self._conn.execute(
                f"SELECT (ts / {step}) * {step} AS b, AVG(cpu_percent), AVG(mem_percent), "
                "CAST(AVG(rss_bytes) AS INTEGER), AVG(temp_c), MIN(disk_free_bytes) "
                "FROM system WHERE ts >= ? AND ts < ? GROUP BY b ORDER BY b",
                (int(start), int(end))).fetchall()
        return [StoredSystemPoint(r[0], step, r[1], r[2], r[3], r[4], r[5]) for r in rows]

    def latest_system(self) -> StoredSystemPoint | None:
        """The newest system sample, or None."""
        with self._lock:
            r = self._conn.execute(
                "SELECT ts, res, cpu_percent, mem_percent, rss_bytes, temp_c, disk_free_bytes "
                "FROM system ORDER BY ts DESC LIMIT 1").fetchone()
        return StoredSystemPoint(*r) if r else None

    def row_count(self) -> int:
        """Rows in the samples table."""
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0])

