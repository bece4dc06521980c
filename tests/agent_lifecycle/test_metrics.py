"""The metrics recorder and its SQLite history, on real database files."""

from __future__ import annotations

import io
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from edge_agent.core.observer import InferenceObserver
from edge_agent.errors import StateStoreError
from edge_agent.metrics import (
    MetricsRecorder,
    MetricsStore,
    SecondRow,
    SystemSampler,
    render_summary,
)
from edge_agent.metrics import histogram as hist
from tests.support.eventually import eventually

T0 = 1_750_000_000  # a fixed wall-clock second for deterministic rows
US = 1_000
# a busy machine generates examples slowly: that is no finding, and no reason to fail
PATIENT = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)


def _record(rec: MetricsRecorder, model: str, version: int, total_ns: list[int], *,
            errors: int = 0) -> None:
    for i, ns in enumerate(total_ns):
        rec.record_request(model, version, ok=i >= errors, rows=2, queue_ns=ns // 4,
                           compute_ns=ns // 2, total_ns=ns)


def test_recorder_satisfies_the_observer_contract(tmp_path: Path) -> None:
    recorder = MetricsRecorder(None)
    observer: InferenceObserver = recorder  # what the batcher is given
    observer.record_request("m", 1, ok=True, rows=1, queue_ns=1, compute_ns=1, total_ns=1)
    observer.record_request("m", 1, ok=False, rows=3, queue_ns=1, compute_ns=1, total_ns=1)
    observer.record_batch("m", 1, 4, 1000)
    (point,) = recorder.flush(T0).points  # what the observer was told, counted once
    assert (point.ts, point.model, point.version) == (T0, "m", 1)
    assert (point.requests, point.errors, point.batches) == (2, 1, 1)
    assert recorder.flush(T0 + 1).points == ()  # and nothing twice


@PATIENT
@given(st.lists(st.integers(min_value=-(1 << 20), max_value=1 << 40), min_size=1))
def test_bucket_bounds_contain_the_value_and_vectorized_matches(values: list[int]) -> None:
    for ns in values:
        i = hist.bucket_of(ns)
        lo, hi = hist.bucket_bounds(i)
        if 0 < i < hist.NUM_BUCKETS - 1:
            assert lo <= ns < hi
            assert (hi - lo) <= 0.25 * lo + 1e-9
        elif i == 0:
            assert ns < 1024
    # the writer thread buckets whole arrays at once: it must agree with the scalar rule
    assert hist.buckets_of(np.array(values)).tolist() == [hist.bucket_of(v) for v in values]


def test_percentiles_track_numpy_on_lognormal_latencies() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(mean=np.log(2e6), sigma=0.8, size=20_000).astype(np.int64)
    counts = hist.new_counts()
    for v in values:
        counts[hist.bucket_of(int(v))] += 1
    for q in (0.5, 0.95, 0.99):
        exact = float(np.quantile(values, q))
        got = hist.percentile(counts, q)
        assert got is not None and abs(got - exact) / exact < 0.13, (q, got, exact)
    assert hist.decode(hist.encode(counts)) == counts
    assert hist.percentile(hist.new_counts(), 0.5) is None


def test_flush_query_and_latest(tmp_path: Path) -> None:
    with MetricsStore.open(tmp_path) as store:
        rec = MetricsRecorder(store)
        _record(rec, "resnet", 1, [1_000 * US] * 90 + [10_000 * US] * 10, errors=5)
        for _ in range(25):
            rec.record_batch("resnet", 1, 4, 3_000 * US)
        _record(rec, "bert", 2, [5_000 * US] * 10)
        sample = rec.flush(T0)
        assert [(p.model, p.version, p.requests) for p in sample.points] == [
            ("bert", 2, 10), ("resnet", 1, 100)]
        _record(rec, "resnet", 1, [1_000 * US] * 50)
        rec.flush(T0 + 1)
        _record(rec, "resnet", 1, [1_000 * US] * 50)
        rec.flush(T0 + 1)  # a second flush in the same second merges

        points = store.query("resnet", T0, T0 + 2, step_s=1)
        assert [(p.ts, p.requests) for p in points] == [(T0, 100), (T0 + 1, 100)]
        first = points[0]
        assert first.errors == 5 and first.error_rate == pytest.approx(0.05)
        assert first.rows == 200 and first.mean_batch == pytest.approx(4.0)
        assert first.requests_per_s == pytest.approx(100.0)
        assert first.p50_ms == pytest.approx(1.0, rel=0.25)
        assert first.p99_ms == pytest.approx(10.0, rel=0.25)
        assert first.mean_queue_ms == pytest.approx((90 * 0.25 + 10 * 2.5) / 100, rel=1e-6)
        second = points[1]
        assert second.p99_ms == pytest.approx(1.0, rel=0.25)

        [both] = store.query("resnet", T0, T0 + 2, step_s=2)
        assert both.requests == 200 and both.requests_per_s == pytest.approx(100.0)
        assert both.p99_ms == pytest.approx(10.0, rel=0.25)  # merged histograms
        assert store.query("resnet", T0, T0 + 2, version=7) == []

        latest = store.latest(now=T0 + 2)
        assert [(p.model, p.version, p.ts) for p in latest] == [("bert", 2, T0),
                                                                 ("resnet", 1, T0 + 1)]
        assert store.latest("resnet", within_s=10, now=T0 + 100) == []


def test_counts_are_exact_under_concurrent_recording(tmp_path: Path) -> None:
    rec = MetricsRecorder(None)

    def work(i: int) -> None:
        for _ in range(5_000):
            rec.record_request("m", i % 2, ok=True, rows=1, queue_ns=10, compute_ns=20,
                               total_ns=30)
            rec.record_batch("m", i % 2, 1, 20)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    sample = rec.flush(T0)
    assert [(p.version, p.requests, p.batches) for p in sample.points] == [
        (0, 10_000, 10_000), (1, 10_000, 10_000)]


def _row(model: str, n: int, ns: int, version: int = 1) -> SecondRow:
    h = hist.new_counts()
    h[hist.bucket_of(ns)] = n
    return SecondRow(model, version, n, 0, n, n, n, n * ns // 4, n * ns // 2, n * ns,
                     list(h), list(h), list(h))


def test_rollup_keeps_counts_and_percentiles(tmp_path: Path) -> None:
    day = 86_400
    with MetricsStore.open(tmp_path, rollup_after_s=day, retention_s=10 * day) as store:
        start = T0 - 2 * day - T0 % 60  # a whole minute, two days back
        for s in range(180):  # three minutes of per-second rows, slow ones in minute two
            store.write(start + s, [_row("m", 10, 50_000 * US if s == 90 else 1_000 * US)])
        store.write(T0 - 5, [_row("m", 3, 2_000 * US)])  # recent: must stay per-second
        before = store.query("m", start, start + 180, step_s=60)
        report = store.maintain(now=T0)
        assert report.rolled_up_rows == 180
        assert store.row_count() == 3 + 1
        after = store.query("m", start, start + 180, step_s=1)  # raised to 60 s
        assert [(p.ts, p.step_s, p.requests) for p in after] == [
            (start, 60, 600), (start + 60, 60, 600), (start + 120, 60, 600)]
        for b, a in zip(before, after, strict=True):
            assert (b.requests, b.rows, b.batches, b.p50_ms, b.p99_ms) == (
                a.requests, a.rows, a.batches, a.p50_ms, a.p99_ms)
        assert after[1].p99_ms == pytest.approx(50.0, rel=0.25)
        assert [p.step_s for p in store.query("m", T0 - 10, T0, step_s=1)] == [1]
        assert store.maintain(now=T0).rolled_up_rows == 0


def test_retention_deletes_old_rows(tmp_path: Path) -> None:
    with MetricsStore.open(tmp_path, retention_s=3600, rollup_after_s=600) as store:
        store.write(T0 - 7200, [_row("m", 1, 1000)])
        store.write(T0 - 60, [_row("m", 1, 1000)])
        assert store.maintain(now=T0).expired_rows == 1
        assert [p.ts for p in store.query("m", 0, T0 + 1, step_s=1)] == [T0 - 60]


def test_size_cap_deletes_oldest_and_shrinks_the_file(tmp_path: Path) -> None:
    cap = 256 * 1024
    with MetricsStore.open(tmp_path, max_bytes=10**9, retention_s=10**9,
                           rollup_after_s=10**9) as store:
        rng = random.Random(3)
        for s in range(2_000):
            rows = [_row(f"model-{k}", 5, rng.randint(1_000, 10**8)) for k in range(4)]
            store.write(T0 + s, rows)
        store.maintain(now=T0 + 2_000)  # checkpoint the WAL so sizes compare like for like
        big = store.path.stat().st_size
        assert store.used_bytes() > cap
        store.max_bytes = cap
        report = store.maintain(now=T0 + 2_000)
        assert report.capped_rows > 0
        assert store.used_bytes() <= cap
        assert store.path.stat().st_size < big  # incremental vacuum gave pages back
        assert store.path.stat().st_size <= cap
        newest = store.query("model-0", T0 + 1_990, T0 + 2_000, step_s=1)
        assert len(newest) == 10  # the newest rows survive
        assert store.query("model-0", T0, T0 + 10, step_s=1) == []


def test_writer_thread_flushes_and_feeds_subscribers(tmp_path: Path) -> None:
    store = MetricsStore.open(tmp_path)
    rec = MetricsRecorder(store, system=SystemSampler(tmp_path))
    seen: list[int] = []
    unsubscribe = rec.subscribe(lambda s: seen.append(sum(p.requests for p in s.points)))
    q, unsubscribe_q = rec.subscribe_queue(maxsize=2)
    rec.start()
    try:

        def heard() -> bool:
            _record(rec, "m", 1, [1_000 * US] * 10)
            return sum(seen) >= 30

        eventually(heard, timeout=30, interval=0.2,
                   message=lambda: f"subscribers heard {sum(seen)} requests, not 30")
        assert q.qsize() <= 2 and q.get(timeout=10).ts > 0
        unsubscribe()
        unsubscribe_q()
    finally:
        rec.stop()
    total = sum(p.requests for p in store.query("m", 0, time.time() + 10, step_s=1))
    assert total >= sum(seen)  # the final flush at stop() may add rows nobody watched
    system = store.latest_system()
    assert system is not None and system.rss_bytes > 0 and system.disk_free_bytes > 0
    assert 0 <= system.mem_percent <= 100
    store.close()


def test_summary_renders_from_a_readonly_open_while_the_writer_has_it_open(
        tmp_path: Path) -> None:
    with MetricsStore.open(tmp_path) as store:
        rec = MetricsRecorder(store, system=SystemSampler(tmp_path))
        _record(rec, "resnet50", 3, [2_000 * US] * 40)
        rec.record_batch("resnet50", 3, 8, 1_000)
        rec.flush(T0 - 5)
        out = io.StringIO()
        shown = render_summary(tmp_path, Console(file=out, width=160), window_s=60, now=T0)
        text = out.getvalue()
        assert shown == 1
        assert "resnet50" in text and "40" in text and "8.0" in text
        assert "agent rss" in text
    with pytest.raises(StateStoreError, match="no metrics database"):
        render_summary(tmp_path / "nowhere", Console(file=io.StringIO()))


def test_aggregation_matches_a_plain_reference() -> None:
    rng = random.Random(11)
    keys = [("a", 1), ("a", 2), ("b", 1)]
    reqs = []
    for _ in range(3_000):
        m, v = rng.choice(keys)
        t = rng.randint(0, 1 << 38)
        reqs.append((m, v, rng.random() > 0.1, rng.randint(1, 8), t // 3, t // 2, t))
    batches = [("c", 9, 4, 1000)] + [(*rng.choice(keys), rng.randint(1, 8), 5) for _ in range(99)]
    rec = MetricsRecorder(None)
    for m, v, ok, n, q, c, t in reqs:
        rec.record_request(m, v, ok=ok, rows=n, queue_ns=q, compute_ns=c, total_ns=t)
    for m, v, size, ns in batches:
        rec.record_batch(m, v, size, ns)
    rows = {(p.model, p.version): p for p in rec.flush(T0).points}
    assert sorted(rows) == [*keys, ("c", 9)]
    for key in keys:
        mine = [r for r in reqs if (r[0], r[1]) == key]
        point = rows[key]
        assert point.requests == len(mine)
        assert point.errors == sum(1 for r in mine if not r[2])
        assert point.rows == sum(r[3] for r in mine)
        ref = hist.new_counts()
        for r in mine:
            ref[hist.bucket_of(r[6])] += 1
        assert point.p99_ms == pytest.approx(hist.percentile(ref, 0.99) / 1e6)
        assert point.mean_queue_ms == pytest.approx(sum(r[4] for r in mine) / len(mine) / 1e6)
        mb = [b for b in batches if (b[0], b[1]) == key]
        assert point.batches == len(mb)
        assert point.mean_batch == pytest.approx(sum(b[2] for b in mb) / len(mb))
    only_batches = rows[("c", 9)]
    assert (only_batches.requests, only_batches.batches, only_batches.mean_batch) == (0, 1, 4.0)


def test_a_record_landing_after_the_swap_is_counted_next_second() -> None:
    rec = MetricsRecorder(None)
    rec.record_request("m", 1, ok=True, rows=1, queue_ns=1, compute_ns=1, total_ns=1)
    # A serving thread that fetched the buffer just before the writer swapped it out...
    stale = rec._req[("m", 1)]
    assert [p.requests for p in rec.flush(T0).points] == [1]
    stale.extend((1, 1, 5, 5, 5))  # ...appends to it after the flush copied it.
    assert [p.requests for p in rec.flush(T0 + 1).points] == [1]
    assert rec.flush(T0 + 2).points == ()


def test_a_malformed_record_never_raises_and_only_its_key_is_dropped(
        caplog: pytest.LogCaptureFixture) -> None:
    rec = MetricsRecorder(None)
    rec.record_request("bad", 1, ok=True, rows=1, queue_ns=1.5, compute_ns=1,  # type: ignore[arg-type]
                       total_ns=1)
    rec.record_request("good", 1, ok=True, rows=1, queue_ns=1, compute_ns=1, total_ns=1)
    points = {p.model: p.requests for p in rec.flush(T0).points}
    assert points == {"bad": 0, "good": 1}
    assert "non-integer" in caplog.text


@PATIENT
@given(st.lists(st.lists(st.integers(min_value=0, max_value=1 << 40),
                         min_size=hist.NUM_BUCKETS, max_size=hist.NUM_BUCKETS),
                min_size=1, max_size=4))
def test_histogram_encoding_round_trips_and_concatenation_sums(hists: list[list[int]]) -> None:
    for h in hists:
        assert hist.decode(hist.encode(h)) == h
    total = [sum(col) for col in zip(*hists, strict=True)]
    assert hist.decode(b"".join(hist.encode(h) for h in hists)) == total
    assert hist.merged(hist.encode(h) for h in hists) == total


def test_system_rss_counts_child_processes(tmp_path: Path) -> None:
    import subprocess
    import sys

    import psutil

    sampler = SystemSampler(tmp_path, children_every=1)
    alone = sampler.sample().rss_bytes
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys; b = bytearray(64 << 20); sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        eventually(lambda: psutil.Process(child.pid).memory_info().rss >= 64 << 20, timeout=60,
                   message="the child never grew to 64 MiB")
        assert sampler.sample().rss_bytes >= alone + (64 << 20) - (8 << 20)
    finally:
        child.communicate(b"", timeout=60)
    assert sampler.sample().rss_bytes < alone + (32 << 20)
