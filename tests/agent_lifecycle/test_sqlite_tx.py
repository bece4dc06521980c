"""The one SQLite write transaction both agent databases use: all or nothing, on real files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from edge_agent.metrics import MetricsStore, SecondRow
from edge_agent.metrics import histogram as hist
from edge_agent.state import DeploymentKind, StateStore


def _row(model: str | None) -> SecondRow:
    empty = [0] * hist.NUM_BUCKETS
    return SecondRow(model=model, version=1, requests=1, errors=0, rows=1,  # type: ignore[arg-type]
                     batches=1, batch_rows=1, queue_ns_sum=1, compute_ns_sum=1, total_ns_sum=1,
                     h_queue=empty, h_compute=empty, h_total=empty)


def test_a_failed_metrics_write_stores_nothing(tmp_path: Path) -> None:
    with MetricsStore(tmp_path / "metrics.db") as store:
        store.write(100, [_row("a")])
        with pytest.raises(sqlite3.IntegrityError):
            store.write(101, [_row("b"), _row(None)])  # the second row breaks NOT NULL
        assert store.row_count() == 1
        store.write(102, [_row("c")])  # the connection is usable again
        assert store.row_count() == 2


def test_a_failed_state_change_changes_nothing(tmp_path: Path) -> None:
    with StateStore.open(tmp_path) as store:
        dep = store.begin_deployment("m", DeploymentKind.DEPLOY, to_version=1, from_version=None)
        with pytest.raises(RuntimeError), store._tx() as c:
            c.execute("UPDATE deployments SET reason = 'half done' WHERE id = ?", (dep,))
            raise RuntimeError("a step failed in the middle")
        assert [d.reason for d in store.history("m")] == [""]


def test_a_metrics_db_made_with_sqlite_utils_still_opens(tmp_path: Path) -> None:
    # earlier agents created the tables with sqlite-utils: this is the schema they left
    path = tmp_path / "metrics.db"
    counters = ("requests", "errors", "rows", "batches", "batch_rows", "queue_ns_sum",
                "compute_ns_sum", "total_ns_sum")
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE [samples] ([model] TEXT NOT NULL, [version] INTEGER NOT NULL, "
        "[ts] INTEGER NOT NULL, [res] INTEGER NOT NULL, "
        + "".join(f"[{c}] INTEGER NOT NULL, " for c in counters)
        + "[h_queue] BLOB, [h_compute] BLOB, [h_total] BLOB, "
        "PRIMARY KEY ([model], [ts], [version], [res]));"
        "CREATE INDEX [idx_samples_res_ts] ON [samples] ([res], [ts]);"
        "CREATE TABLE [system] ([ts] INTEGER, [res] INTEGER, [cpu_percent] FLOAT, "
        "[mem_percent] FLOAT, [rss_bytes] INTEGER, [temp_c] FLOAT, [disk_free_bytes] INTEGER, "
        "PRIMARY KEY ([ts], [res]));")
    conn.close()
    with MetricsStore(path) as store:
        store.write(100, [_row("a")])
        store.write(100, [_row("a")])  # same key: merged into one row
        assert store.row_count() == 1
        indexes = [r[0] for r in store._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'samples' "
            "AND sql IS NOT NULL")]
        assert indexes == ["idx_samples_res_ts"]
