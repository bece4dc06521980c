"""A metrics database deleted (or replaced) under load (issue 19): the writer kept writing to
the deleted file and `edge-agent metrics` found nothing, for good. Now the store notices that
its path no longer names the file it opened, warns, and starts a new database there."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from edge_agent.metrics.store import DB_NAME, MetricsStore, SecondRow
from tests.security.abuse import limited_agent
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.traffic import Bystander


def _row(requests: int) -> SecondRow:
    return SecondRow(model="mlp", version=1, requests=requests, errors=0, rows=requests,
                     batches=1, batch_rows=requests, queue_ns_sum=0, compute_ns_sum=0,
                     total_ns_sum=0, h_queue=[], h_compute=[], h_total=[])


def _rows_on_disk(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with MetricsStore(path, readonly=True) as reader:
            return reader.row_count()
    except Exception:
        return 0


def test_the_store_reopens_a_removed_database(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / DB_NAME
    with MetricsStore(path) as store:
        store.write(1000, [_row(3)])
        path.unlink()
        assert store.check_file(force=True)  # the writer does this every 2 s (in write())
        store.write(1001, [_row(4)])
        assert path.exists(), "the store kept writing to the deleted file"
        assert _rows_on_disk(path) == 1
        assert "was removed" in caplog.text
        # replaced by another file: the same
        other = tmp_path / "other.db"
        with MetricsStore(other) as o:
            o.write(5, [_row(1)])
        path.unlink()
        shutil.copy(other, path)
        assert store.check_file(force=True)
        assert "was replaced" in caplog.text
        store.write(1002, [_row(5)])
        assert _rows_on_disk(path) == 2
        assert not store.check_file(force=True)  # unchanged: nothing to do


def test_an_agent_recreates_its_metrics_database_after_deletion(
        bundles: Bundles, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="edge_agent.metrics.store")
    with limited_agent(tmp_path / "state", bundles) as agent, Bystander(agent.grpc) as load:
        path = agent.state_dir / DB_NAME
        eventually(lambda: _rows_on_disk(path) > 0,
                          message="never true: _rows_on_disk(path) > 0")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        eventually(lambda: _rows_on_disk(path) > 0, message="metrics never reappeared")
        assert "was removed" in caplog.text
        assert not load.failures
