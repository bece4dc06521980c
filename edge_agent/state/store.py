"""The agent's durable state: model versions on disk, active versions, deployment history.

One SQLite file in WAL mode with ``synchronous=FULL``: a committed change survives a crash or
power loss. The active version of a model changes only inside :meth:`StateStore.commit_deployment`,
one transaction that also marks the deployment committed, so after any crash the database shows
either the old active version with the deployment unfinished, or the new one with it committed.
On open, deployments left in progress by a crash are marked ``interrupted`` (see ``recovered``).

Usage (the model manager)::

    store = StateStore.open(state_dir)
    dep = store.begin_deployment("resnet", DeploymentKind.DEPLOY, to_version=3, from_version=2)
    store.record_step(dep, Step.RECEIVED, "12.3 MB")
    store.upsert_version(VersionRecord("resnet", 3, path, sha, size))
    ...                                    # verified, staged, loaded, warmed, probed, switched
    store.commit_deployment(dep)           # active version 2 -> 3, atomically
    # or: store.fail_deployment(dep, "probe failed: ...", failed_step=Step.PROBED)
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

from edge_agent.errors import StateStoreError
from edge_agent.sqlite_tx import write_transaction
from edge_agent.state.lock import PRIVATE_FILE_MODE, make_private_dirs, not_writable
from edge_agent.state.records import (
    Deployment,
    DeploymentKind,
    DeploymentStatus,
    Step,
    StepRecord,
    TuningRecord,
    VersionRecord,
    VersionState,
)

DB_NAME = "state.db"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    name TEXT PRIMARY KEY,
    active_version INTEGER,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    model TEXT NOT NULL,
    version INTEGER NOT NULL,
    path TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    state TEXT NOT NULL,
    load_ms REAL,
    rss_delta_bytes INTEGER,
    load_error TEXT,
    added_at REAL NOT NULL,
    PRIMARY KEY (model, version)
);
CREATE TABLE IF NOT EXISTS deployments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    from_version INTEGER,
    to_version INTEGER,
    status TEXT NOT NULL,
    last_step TEXT,
    reason TEXT NOT NULL DEFAULT '',
    started_at REAL NOT NULL,
    ended_at REAL
);
CREATE INDEX IF NOT EXISTS deployments_by_model ON deployments (model, id);
CREATE UNIQUE INDEX IF NOT EXISTS one_deployment_in_progress_per_model
    ON deployments (model) WHERE status = 'in_progress';
CREATE TABLE IF NOT EXISTS deployment_steps (
    deployment_id INTEGER NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    step TEXT NOT NULL,
    ok INTEGER NOT NULL,
    message TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (deployment_id, seq)
);
CREATE TABLE IF NOT EXISTS version_parity (
    model TEXT NOT NULL,
    version INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    figures TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (model, version)
);
CREATE TABLE IF NOT EXISTS settings_changes (
    deployment_id INTEGER PRIMARY KEY REFERENCES deployments (id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    before TEXT NOT NULL,
    after TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS model_settings (
    model TEXT PRIMARY KEY,
    settings TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tuning_results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    model TEXT NOT NULL,
    at REAL NOT NULL,
    summary TEXT NOT NULL,
    data TEXT NOT NULL
);
"""

_ACTIVATING = (DeploymentKind.DEPLOY, DeploymentKind.ROLLBACK, DeploymentKind.ACTIVATE,
               DeploymentKind.AUTO_ROLLBACK)


class StateStore:
    """Durable per-model state in ``<state_dir>/state.db``. Thread-safe (one serialized connection).

    Use :meth:`open` with a state directory, or the constructor with a database path.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            _create_private(self.path)
            self._conn = sqlite3.connect(self.path, isolation_level=None, timeout=10,
                                         check_same_thread=False)
            self._setup()
        except OSError as exc:
            if not _writable(self.path):
                raise not_writable(self.path.parent, exc) from None
            raise StateStoreError(f"cannot create the state database {self.path}: "
                                  f"{exc.strerror or exc}") from None
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and not _writable(self.path):
                raise not_writable(self.path.parent) from None
            raise StateStoreError(
                f"cannot open the state database {self.path}: {exc}; if it is corrupt, move it "
                "aside and restart the agent (models on disk are then re-registered)") from exc
        #: Deployments that were in progress when the agent last died, now marked interrupted.
        self.recovered: tuple[Deployment, ...] = self._recover_interrupted()

    @classmethod
    def open(cls, state_dir: str | os.PathLike[str]) -> StateStore:
        """Open (creating if needed) the state database in ``state_dir``."""
        directory = Path(state_dir)
        try:
            make_private_dirs(directory)
        except OSError as exc:
            raise StateStoreError(f"cannot create the state directory {directory}: "
                                  f"{exc.strerror or exc}") from exc
        return cls(directory / DB_NAME)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- setup ---------------------------------------------------------------------------------

    def _setup(self) -> None:
        c = self._conn
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")
        c.execute("PRAGMA foreign_keys=ON")
        c.execute("PRAGMA busy_timeout=10000")
        check = c.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {check}")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {version} is newer than this agent understands "
                f"({SCHEMA_VERSION}); upgrade the agent")
        with self._tx():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    c.execute(statement)
            c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction (:func:`edge_agent.sqlite_tx.write_transaction`).

        A database error (disk full, read-only file system, I/O error) becomes a
        StateStoreError whose ``__cause__`` is the sqlite3 error; nothing stays half-written
        and the connection is left usable."""
        return write_transaction(self._conn, self._lock, wrap=lambda exc: StateStoreError(
            f"the state database {self.path} could not be written: {exc}"))

    def _recover_interrupted(self) -> tuple[Deployment, ...]:
        now = time.time()
        with self._tx() as c:
            rows = c.execute("SELECT id, last_step FROM deployments WHERE status = ?",
                             (DeploymentStatus.IN_PROGRESS,)).fetchall()
            for dep_id, last_step in rows:
                reached = last_step or "none"
                c.execute("UPDATE deployments SET status = ?, ended_at = ?, reason = ? "
                          "WHERE id = ?",
                          (DeploymentStatus.INTERRUPTED, now,
                           f"the agent stopped during the deployment (last step reached: "
                           f"{reached})", dep_id))
                self._insert_step(c, dep_id, Step.INTERRUPTED, True,
                                  f"found in progress at start-up; last step: {reached}", now)
        return tuple(self.deployment(dep_id) for dep_id, _ in rows)

    # -- versions ------------------------------------------------------------------------------

    def upsert_version(self, record: VersionRecord) -> None:
        """Record (or replace) one model version on disk."""
        added = record.added_at or time.time()
        with self._tx() as c:
            self._ensure_model(c, record.model)
            c.execute(
                "INSERT OR REPLACE INTO versions (model, version, path, manifest_sha256, "
                "size_bytes, state, load_ms, rss_delta_bytes, load_error, added_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.model, record.version, record.path, record.manifest_sha256,
                 record.size_bytes, VersionState(record.state), record.load_ms,
                 record.rss_delta_bytes, record.load_error, added))

    def set_version_state(self, model: str, version: int, state: VersionState, *,
                          load_ms: float | None = None, rss_delta_bytes: int | None = None,
                          load_error: str | None = None) -> None:
        """Update a version's state; load figures are kept unless new ones are given."""
        with self._tx() as c:
            cur = c.execute(
                "UPDATE versions SET state = ?, load_ms = COALESCE(?, load_ms), "
                "rss_delta_bytes = COALESCE(?, rss_delta_bytes), load_error = ? "
                "WHERE model = ? AND version = ?",
                (VersionState(state), load_ms, rss_delta_bytes, load_error, model, version))
            if cur.rowcount == 0:
                raise StateStoreError(f"model {model!r} has no recorded version {version}")

    def record_parity(self, deployment_id: int, ok: bool, figures: str) -> None:
        """Keep the on-device parity result of ``deployment_id``'s target version (the latest
        check of a version replaces the one before)."""
        with self._tx() as c:
            c.execute(
                "INSERT OR REPLACE INTO version_parity (model, version, ok, figures, at) "
                "SELECT model, to_version, ?, ?, ? FROM deployments "
                "WHERE id = ? AND to_version IS NOT NULL",
                (int(ok), figures, time.time(), deployment_id))

    def parity(self) -> dict[tuple[str, int], tuple[bool, str]]:
        """Every version's last on-device parity result: (ok, figures)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT model, version, ok, figures FROM version_parity").fetchall()
        return {(r[0], int(r[1])): (bool(r[2]), str(r[3])) for r in rows}

    def remove_version(self, model: str, version: int) -> None:
        """Forget a version (after its files are deleted). Refuses the active version."""
        with self._tx() as c:
            if self._active(c, model) == version:
                raise StateStoreError(
                    f"version {version} of {model!r} is active; activate another version "
                    "or remove the model first")
            c.execute("DELETE FROM versions WHERE model = ? AND version = ?", (model, version))
            c.execute("DELETE FROM version_parity WHERE model = ? AND version = ?",
                      (model, version))

    def version(self, model: str, version: int) -> VersionRecord | None:
        """One recorded version, or None."""
        rows = self._versions("WHERE model = ? AND version = ?", (model, version))
        return rows[0] if rows else None

    def versions(self, model: str | None = None) -> list[VersionRecord]:
        """Recorded versions (of one model, or all), ordered by model then version."""
        if model is None:
            return self._versions("", ())
        return self._versions("WHERE model = ?", (model,))

    def _versions(self, where: str, args: tuple[object, ...]) -> list[VersionRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT model, version, path, manifest_sha256, size_bytes, state, load_ms, "
                f"rss_delta_bytes, load_error, added_at FROM versions {where} "
                "ORDER BY model, version", args).fetchall()
        return [VersionRecord(model=r[0], version=r[1], path=r[2], manifest_sha256=r[3],
                              size_bytes=r[4], state=VersionState(r[5]), load_ms=r[6],
                              rss_delta_bytes=r[7], load_error=r[8], added_at=r[9])
                for r in rows]

    # -- active versions -----------------------------------------------------------------------

    def active_version(self, model: str) -> int | None:
        """The committed active version of ``model``, or None."""
        with self._lock:
            return self._active(self._conn, model)

    def active_versions(self) -> dict[str, int | None]:
        """Every known model and its committed active version (None: nothing active)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT name, active_version FROM models ORDER BY name").fetchall()
        return dict(rows)

    @staticmethod
    def _active(c: sqlite3.Connection, model: str) -> int | None:
        row = c.execute("SELECT active_version FROM models WHERE name = ?", (model,)).fetchone()
        return row[0] if row else None

    @staticmethod
    def _ensure_model(c: sqlite3.Connection, model: str) -> None:
        c.execute("INSERT OR IGNORE INTO models (name, active_version, updated_at) "
                  "VALUES (?, NULL, ?)", (model, time.time()))

    # -- deployments ---------------------------------------------------------------------------

    def begin_deployment(self, model: str, kind: DeploymentKind, *, to_version: int | None,
                         from_version: int | None = None) -> int:
        """Start recording a deployment; returns its id. One per model at a time.

        ``to_version`` is the version that becomes active on commit (for ``REMOVE``: the
        version being removed). ``from_version`` defaults to the current active version.
        """
        kind = DeploymentKind(kind)
        now = time.time()
        with self._tx() as c:
            self._ensure_model(c, model)
            if from_version is None:
                from_version = self._active(c, model)
            try:
                cur = c.execute(
                    "INSERT INTO deployments (model, kind, from_version, to_version, status, "
                    "started_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (model, kind, from_version, to_version, DeploymentStatus.IN_PROGRESS, now))
            except sqlite3.IntegrityError:
                busy = c.execute("SELECT id, kind FROM deployments WHERE model = ? AND "
                                 "status = ?", (model, DeploymentStatus.IN_PROGRESS)).fetchone()
                raise StateStoreError(
                    f"a {busy[1]} of {model!r} is already in progress (deployment {busy[0]}); "
                    "wait for it to finish") from None
            return int(cur.lastrowid or 0)

    def record_step(self, deployment_id: int, step: Step, message: str = "", *,
                    ok: bool = True) -> None:
        """Append a step to a deployment (durably); ``ok`` steps advance its last step."""
        step = Step(step)
        with self._tx() as c:
            self._require(c, deployment_id)
            self._insert_step(c, deployment_id, step, ok, message, time.time())
            if ok:
                c.execute("UPDATE deployments SET last_step = ? WHERE id = ?",
                          (step, deployment_id))

    def commit_deployment(self, deployment_id: int, message: str = "") -> Deployment:
        """Finish a deployment successfully, changing the active version in one transaction.

        Deploy/rollback/activate/auto-rollback make ``to_version`` active (it must be a
        recorded version). Remove forgets ``to_version`` and, if it was active, leaves the
        model with no active version.
        """
        now = time.time()
        with self._tx() as c:
            model, kind, to_version, status = self._require(c, deployment_id)
            if status != DeploymentStatus.IN_PROGRESS:
                raise StateStoreError(f"deployment {deployment_id} is already {status}")
            new_active: int | None
            if kind is DeploymentKind.SETTINGS:
                self._commit_settings(c, deployment_id, model, now)
                new_active = self._active(c, model)
            elif kind in _ACTIVATING:
                known = c.execute("SELECT 1 FROM versions WHERE model = ? AND version = ?",
                                  (model, to_version)).fetchone()
                if to_version is None or known is None:
                    raise StateStoreError(
                        f"cannot activate version {to_version} of {model!r}: it is not "
                        "recorded on this device (upsert_version first)")
                new_active = to_version
            else:
                active = self._active(c, model)
                new_active = None if active == to_version else active
                c.execute("DELETE FROM versions WHERE model = ? AND version = ?",
                          (model, to_version))
            c.execute("UPDATE models SET active_version = ?, updated_at = ? WHERE name = ?",
                      (new_active, now, model))
            self._insert_step(c, deployment_id, Step.COMMITTED, True, message, now)
            c.execute("UPDATE deployments SET status = ?, last_step = ?, ended_at = ?, "
                      "reason = ? WHERE id = ?",
                      (DeploymentStatus.COMMITTED, Step.COMMITTED, now, message, deployment_id))
        return self.deployment(deployment_id)

    @staticmethod
    def _commit_settings(c: sqlite3.Connection, deployment_id: int, model: str,
                         now: float) -> None:
        row = c.execute("SELECT after FROM settings_changes WHERE deployment_id = ?",
                        (deployment_id,)).fetchone()
        if row is None:
            raise StateStoreError(f"deployment {deployment_id} has no settings recorded "
                                  "(record_settings_change first)")
        c.execute("INSERT OR REPLACE INTO model_settings (model, settings, updated_at) "
                  "VALUES (?, ?, ?)", (model, row[0], now))

    # -- live settings and tuning results --------------------------------------------------------

    def record_settings_change(self, deployment_id: int, before: str, after: str) -> None:
        """Attach a settings change (JSON objects) to a ``settings`` deployment; the model's
        live settings become ``after`` when the deployment commits, and only then."""
        with self._tx() as c:
            model, _, _, _ = self._require(c, deployment_id)
            c.execute("INSERT OR REPLACE INTO settings_changes (deployment_id, model, before, "
                      "after) VALUES (?, ?, ?, ?)", (deployment_id, model, before, after))

    def settings_change(self, deployment_id: int) -> tuple[str, str] | None:
        """(before, after) of a settings deployment, or None."""
        with self._lock:
            row = self._conn.execute("SELECT before, after FROM settings_changes WHERE "
                                     "deployment_id = ?", (deployment_id,)).fetchone()
        return (row[0], row[1]) if row else None

    def live_settings(self) -> dict[str, str]:
        """Model -> its committed live settings (a JSON object)."""
        with self._lock:
            rows = self._conn.execute("SELECT model, settings FROM model_settings").fetchall()
        return dict(rows)

    def add_tuning_result(self, model: str, summary: str, data: str) -> int:
        """Store one tuning run; returns its id."""
        with self._tx() as c:
            cur = c.execute("INSERT INTO tuning_results (model, at, summary, data) VALUES "
                            "(?, ?, ?, ?)", (model, time.time(), summary, data))
            return int(cur.lastrowid or 0)

    def tuning_results(self, model: str | None = None, *, latest_only: bool = False,
                       limit: int = 50) -> list[TuningRecord]:
        """Tuning runs, newest first (of one model, or all); ``latest_only``: one per model."""
        where, args = ("WHERE model = ?", (model,)) if model else ("", ())
        if latest_only:
            where = (where + (" AND " if where else "WHERE ")
                     + "id IN (SELECT MAX(id) FROM tuning_results GROUP BY model)")
        with self._lock:
            rows = self._conn.execute(
                f"SELECT id, model, at, summary, data FROM tuning_results {where} "
                "ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()
        return [TuningRecord(*r) for r in rows]

    def fail_deployment(self, deployment_id: int, reason: str, *,
                        failed_step: Step | None = None) -> Deployment:
        """Finish a deployment as failed; the active version is left as it was."""
        now = time.time()
        with self._tx() as c:
            _, _, _, status = self._require(c, deployment_id)
            if status != DeploymentStatus.IN_PROGRESS:
                raise StateStoreError(f"deployment {deployment_id} is already {status}")
            if failed_step is not None:
                self._insert_step(c, deployment_id, Step(failed_step), False, reason, now)
            self._insert_step(c, deployment_id, Step.FAILED, True, reason, now)
            c.execute("UPDATE deployments SET status = ?, ended_at = ?, reason = ? WHERE id = ?",
                      (DeploymentStatus.FAILED, now, reason, deployment_id))
        return self.deployment(deployment_id)

    def deployment(self, deployment_id: int) -> Deployment:
        """One deployment with its steps."""
        found = self._deployments("WHERE id = ?", (deployment_id,), 1)
        if not found:
            raise StateStoreError(f"there is no deployment {deployment_id}")
        return found[0]

    def history(self, model: str | None = None, limit: int = 50) -> list[Deployment]:
        """Deployments, newest first (of one model, or all)."""
        if model is None:
            return self._deployments("", (), limit)
        return self._deployments("WHERE model = ?", (model,), limit)

    def deployment_totals(self) -> list[tuple[str, str, str, int, float]]:
        """Finished deployments per (model, kind, status): count and total seconds taken
        (``/metrics`` reads it at scrape time)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT model, kind, status, COUNT(*), "
                "COALESCE(SUM(MAX(ended_at - started_at, 0)), 0) FROM deployments "
                "WHERE ended_at IS NOT NULL GROUP BY model, kind, status").fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), int(r[3]), float(r[4])) for r in rows]

    def last_switches(self) -> dict[str, float]:
        """Seconds the newest committed change of each model's active version took."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT model, ended_at - started_at FROM deployments WHERE id IN ("
                "SELECT MAX(id) FROM deployments WHERE status = ? AND kind != ? "
                "GROUP BY model)", (DeploymentStatus.COMMITTED, DeploymentKind.REMOVE)
            ).fetchall()
        return {str(r[0]): max(0.0, float(r[1] or 0.0)) for r in rows}

    def in_progress(self) -> list[Deployment]:
        """Deployments currently in progress."""
        return self._deployments("WHERE status = ?", (DeploymentStatus.IN_PROGRESS,), 1000)

    def _deployments(self, where: str, args: tuple[object, ...], limit: int) -> list[Deployment]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, model, kind, from_version, to_version, status, last_step, reason, "
                f"started_at, ended_at FROM deployments {where} ORDER BY id DESC LIMIT ?",
                (*args, limit)).fetchall()
            steps: dict[int, list[StepRecord]] = {r[0]: [] for r in rows}
            if rows:
                marks = ",".join("?" * len(rows))
                for dep_id, step, ok, message, at in self._conn.execute(
                        "SELECT deployment_id, step, ok, message, at FROM deployment_steps "
                        f"WHERE deployment_id IN ({marks}) ORDER BY deployment_id, seq",
                        [r[0] for r in rows]):
                    steps[dep_id].append(StepRecord(Step(step), bool(ok), message, at))
        return [Deployment(id=r[0], model=r[1], kind=DeploymentKind(r[2]), from_version=r[3],
                           to_version=r[4], status=DeploymentStatus(r[5]),
                           last_step=Step(r[6]) if r[6] else None, reason=r[7],
                           started_at=r[8], ended_at=r[9], steps=tuple(steps[r[0]]))
                for r in rows]

    @staticmethod
    def _require(c: sqlite3.Connection, deployment_id: int) -> tuple[str, DeploymentKind,
                                                                     int | None, str]:
        row = c.execute("SELECT model, kind, to_version, status FROM deployments WHERE id = ?",
                        (deployment_id,)).fetchone()
        if row is None:
            raise StateStoreError(f"there is no deployment {deployment_id}")
        return row[0], DeploymentKind(row[1]), row[2], row[3]

    @staticmethod
    def _insert_step(c: sqlite3.Connection, deployment_id: int, step: Step, ok: bool,
                     message: str, at: float) -> None:
        c.execute(
            "INSERT INTO deployment_steps (deployment_id, seq, step, ok, message, at) "
            "VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM deployment_steps "
            "WHERE deployment_id = ?), ?, ?, ?, ?)",
            (deployment_id, deployment_id, step, int(ok), message, at))

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` result (``"ok"`` when healthy)."""
        with self._lock:
            return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])


def read_active_versions(state_dir: str | os.PathLike[str]) -> dict[str, int | None]:
    """Every model's committed active version, read without writing anything (the database
    opened read-only; a running agent may keep writing it). StateStoreError when there is no
    readable state database in ``state_dir``."""
    path = Path(state_dir) / DB_NAME
    if not path.is_file():
        raise StateStoreError(f"{state_dir} holds no state database ({DB_NAME}); give the "
                              "state directory of an agent that has served models")
    # with an agent running (its WAL files present) a read-only connection shares them; with
    # none, "immutable" keeps SQLite from creating WAL files that the agent would then find
    # owned by another user
    running = path.with_name(f"{DB_NAME}-wal").exists()
    mode = "mode=ro" if running else "immutable=1"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=10)
        try:
            rows = conn.execute("SELECT name, active_version FROM models ORDER BY name")
            return dict(rows.fetchall())
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StateStoreError(f"cannot read the state database {path}: {exc}") from exc


def _create_private(path: Path) -> None:
    """Create the database file 0600 (whatever the umask) so SQLite's WAL and SHM files,
    which take the database's mode, are private too."""
    if path.exists():
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                     PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)


def _writable(path: Path) -> bool:
    """Whether this process may write the database file and create files beside it."""
    directory = path.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        return False
    return not path.exists() or os.access(path, os.W_OK)
