"""Cache hits reach the metrics: a real data plane, the recorder and the SQLite history."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import numpy as np
from rich.console import Console

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.metrics import MetricsRecorder, MetricsStore, SecondRow, render_summary
from tests.fastpath.conftest import MlpBundles
from tests.support.core_bundles import install

T0 = 1_750_000_000


def test_cache_hits_are_counted_in_the_metrics(tmp_path: Path, mlp_bundles: MlpBundles) -> None:
    install(mlp_bundles.v1, tmp_path / "state")
    with MetricsStore.open(tmp_path / "state") as store:
        recorder = MetricsRecorder(store)
        dp = DataPlane(tmp_path / "state", observer=recorder,
                       overrides={"mlp": ModelOverrides(response_cache=True)},
                       response_cache_bytes=1 << 20)
        try:
            x = np.ones((1, 64), np.float32)
            for _ in range(4):  # one miss, three hits
                dp.infer(InferRequest("mlp", {"input": x}))
        finally:
            dp.close()
        (point,) = recorder.flush(T0).points
        assert (point.requests, point.errors, point.cache_hits) == (4, 0, 3)
        assert point.cache_hit_rate == 0.75
        (summary,) = store.summary(60, now=T0 + 1)
        assert summary.cache_hits == 3
    out = io.StringIO()
    render_summary(tmp_path / "state", Console(file=out, width=200), now=T0 + 1)
    assert "3 (75%)" in out.getvalue()


def test_a_database_of_an_older_agent_gains_the_cache_column(tmp_path: Path) -> None:
    db = tmp_path / "metrics.db"
    with sqlite3.connect(db) as conn:  # the schema before the response cache
        conn.execute(
            "CREATE TABLE samples (model TEXT NOT NULL, version INTEGER NOT NULL, ts INTEGER "
            "NOT NULL, res INTEGER NOT NULL, requests INTEGER NOT NULL, errors INTEGER NOT NULL, "
            "rows INTEGER NOT NULL, batches INTEGER NOT NULL, batch_rows INTEGER NOT NULL, "
            "queue_ns_sum INTEGER NOT NULL, compute_ns_sum INTEGER NOT NULL, total_ns_sum "
            "INTEGER NOT NULL, h_queue BLOB, h_compute BLOB, h_total BLOB, "
            "PRIMARY KEY (model, ts, version, res))")
        conn.execute("INSERT INTO samples VALUES ('old', 1, ?, 1, 5, 0, 5, 5, 5, 0, 0, 0, "
                     "NULL, NULL, NULL)", (T0,))
    with MetricsStore(db, readonly=True) as old:  # read as it is: no hits
        (point,) = old.summary(60, now=T0 + 1)
        assert (point.requests, point.cache_hits) == (5, 0)
    with MetricsStore(db) as store:
        store.write(T0, [SecondRow("new", 1, 2, 0, 2, 1, 2, 0, 0, 0, [], [], [],
                                   cache_hits=1)])
        points = {p.model: p for p in store.summary(60, now=T0 + 1)}
        assert (points["old"].cache_hits, points["new"].cache_hits) == (0, 1)
