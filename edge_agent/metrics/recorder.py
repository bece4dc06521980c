"""The metrics recorder: in-memory counters on the hot path, a writer thread flushing each second.

:class:`MetricsRecorder` implements :class:`edge_agent.core.observer.InferenceObserver`. Its
``record_*`` methods take one short uncontended lock and do integer arithmetic only; once a
second the writer thread swaps the counters out, writes them to the :class:`MetricsStore`
(one row per model version), samples the system, and feeds live subscribers.

Wiring::

    store = MetricsStore.open(state_dir, retention_s=..., max_bytes=...)
    recorder = MetricsRecorder(store, system=SystemSampler(state_dir))
    recorder.start()                   # thread "edge-metrics-writer"
    core = ServingCore(..., observer=recorder)
    unsubscribe = recorder.subscribe(callback)   # WatchMetrics: callback(LiveSample) per second
    ...
    recorder.stop()                    # final flush, joins the thread; then store.close()
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from edge_agent.metrics import histogram as hist
from edge_agent.metrics.store import MetricPoint, MetricsStore, SecondRow, make_point
from edge_agent.metrics.system import SystemSample, SystemSampler

log = logging.getLogger(__name__)

_NB_LAST = hist.NUM_BUCKETS - 1
_MIN_BITS = hist.MIN_BITS
_MAX_BITS = hist.MAX_BITS
_SHIFT_BACK = 1 + hist.SUB_BITS
_SUB_MASK = hist.SUBS - 1
_SUB_BITS = hist.SUB_BITS
_OFFSET = (hist.MIN_BITS << hist.SUB_BITS) - 1  # so index = (b << SUB_BITS) - _OFFSET + sub
assert hist.bucket_of(1 << 20) == ((21 << _SUB_BITS) - _OFFSET)  # the inlined arithmetic


@dataclass(frozen=True, slots=True)
class LiveSample:
    """What subscribers receive once a second: per model version points and a system sample."""

    ts: int
    points: tuple[MetricPoint, ...]
    system: SystemSample | None


class _Acc:
    """Counters of one model version for the current interval."""

    __slots__ = ("batch_rows", "batches", "compute_sum", "errors", "hc", "hq", "ht",
                 "queue_sum", "requests", "rows", "total_sum")

    def __init__(self) -> None:
        self.requests = self.errors = self.rows = self.batches = self.batch_rows = 0
        self.queue_sum = self.compute_sum = self.total_sum = 0
        self.hq = hist.new_counts()
        self.hc = hist.new_counts()
        self.ht = hist.new_counts()


class MetricsRecorder:
    """Counts requests and batches per model version and persists them once a second.

    ``store`` None keeps metrics in memory only (live subscribers still get samples).
    ``system`` None skips system samples. ``maintenance_every_s``: how often the writer thread
    runs :meth:`MetricsStore.maintain` (rollup, retention, size cap).
    """

    def __init__(self, store: MetricsStore | None, *, system: SystemSampler | None = None,
                 maintenance_every_s: float = 60.0) -> None:
        self.store = store
        self.system = system
        self.maintenance_every_s = maintenance_every_s
        self._lock = threading.Lock()
        self._cur: dict[tuple[str, int], _Acc] = {}
        self._subs_lock = threading.Lock()
        self._subs: list[Callable[[LiveSample], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error_log = 0.0

    # -- the hot path (InferenceObserver) ------------------------------------------------------

    def record_request(self, model: str, version: int, *, ok: bool, rows: int, queue_ns: int,
                       compute_ns: int, total_ns: int) -> None:
        """Count one finished request (durations are int nanoseconds)."""
        with self._lock:
            acc = self._cur.get((model, version))
            if acc is None:
                acc = self._cur[(model, version)] = _Acc()
            acc.requests += 1
            if not ok:
                acc.errors += 1
            acc.rows += rows
            acc.queue_sum += queue_ns
            acc.compute_sum += compute_ns
            acc.total_sum += total_ns
            b = queue_ns.bit_length()
            acc.hq[0 if b < _MIN_BITS else _NB_LAST if b > _MAX_BITS else
                   (b << _SUB_BITS) - _OFFSET + ((queue_ns >> (b - _SHIFT_BACK)) & _SUB_MASK)] += 1
            b = compute_ns.bit_length()
            acc.hc[0 if b < _MIN_BITS else _NB_LAST if b > _MAX_BITS else
                   (b << _SUB_BITS) - _OFFSET + ((compute_ns >> (b - _SHIFT_BACK)) & _SUB_MASK)
                   ] += 1
            b = total_ns.bit_length()
            acc.ht[0 if b < _MIN_BITS else _NB_LAST if b > _MAX_BITS else
                   (b << _SUB_BITS) - _OFFSET + ((total_ns >> (b - _SHIFT_BACK)) & _SUB_MASK)] += 1

    def record_batch(self, model: str, version: int, batch_size: int, compute_ns: int) -> None:
        """Count one backend execution of ``batch_size`` rows."""
        with self._lock:
            acc = self._cur.get((model, version))
            if acc is None:
                acc = self._cur[(model, version)] = _Acc()
            acc.batches += 1
            acc.batch_rows += batch_size

    # -- flushing ------------------------------------------------------------------------------

    def flush(self, ts: int | None = None) -> LiveSample:
        """Write everything counted since the last flush as second ``ts`` (default: now).

        Called by the writer thread each second; callable directly (tests, shutdown).
        """
        ts = int(time.time()) if ts is None else ts
        with self._lock:
            cur, self._cur = self._cur, {}
        rows = [SecondRow(model, version, a.requests, a.errors, a.rows, a.batches, a.batch_rows,
                          a.queue_sum, a.compute_sum, a.total_sum, a.hq, a.hc, a.ht)
                for (model, version), a in sorted(cur.items())]
        system = self.system.sample(ts) if self.system is not None else None
        if self.store is not None:
            self.store.write(ts, rows, system)
        sample = LiveSample(ts, tuple(_point(ts, r) for r in rows), system)
        with self._subs_lock:
            subs = list(self._subs)
        for callback in subs:
            try:
                callback(sample)
            except Exception:
                log.exception("a metrics subscriber failed")
        return sample

    def start(self) -> None:
        """Start the writer thread (flush each wall-clock second, maintenance each minute)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="edge-metrics-writer",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the writer thread and flush what is left. Does not close the store."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout)
        self._safe(self.flush)

    def _run(self) -> None:
        next_wake = math.floor(time.time()) + 1.005
        next_maintenance = time.monotonic() + self.maintenance_every_s
        while not self._stop.wait(max(0.0, next_wake - time.time())):
            ts = int(next_wake) - 1  # the second that just ended
            self._safe(lambda ts=ts: self.flush(ts))
            if self.store is not None and time.monotonic() >= next_maintenance:
                self._safe(self.store.maintain)
                next_maintenance = time.monotonic() + self.maintenance_every_s
            next_wake += 1
            if next_wake < time.time():  # fell behind (suspend, long GC): skip ahead
                next_wake = math.floor(time.time()) + 1.005

    def _safe(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            now = time.monotonic()
            if now - self._last_error_log > 60:  # a full disk must not flood the journal
                self._last_error_log = now
                log.exception("writing metrics failed; the agent keeps serving")

    # -- live subscription ---------------------------------------------------------------------

    def subscribe(self, callback: Callable[[LiveSample], None]) -> Callable[[], None]:
        """Call ``callback(sample)`` after each flush (on the writer thread: keep it quick,
        e.g. ``loop.call_soon_threadsafe``). Returns a function that unsubscribes."""
        with self._subs_lock:
            self._subs.append(callback)

        def unsubscribe() -> None:
            with self._subs_lock:
                if callback in self._subs:
                    self._subs.remove(callback)

        return unsubscribe

    def subscribe_queue(self, maxsize: int = 60) -> tuple[queue.Queue[LiveSample],
                                                          Callable[[], None]]:
        """A bounded queue fed each second (the oldest sample is dropped when it is full)."""
        q: queue.Queue[LiveSample] = queue.Queue(maxsize)

        def put(sample: LiveSample) -> None:
            while True:
                try:
                    q.put_nowait(sample)
                    return
                except queue.Full:
                    with contextlib.suppress(queue.Empty):
                        q.get_nowait()

        return q, self.subscribe(put)


def _point(ts: int, r: SecondRow) -> MetricPoint:
    counters = {"requests": r.requests, "errors": r.errors, "rows": r.rows,
                "batches": r.batches, "batch_rows": r.batch_rows,
                "queue_ns_sum": r.queue_ns_sum, "compute_ns_sum": r.compute_ns_sum,
                "total_ns_sum": r.total_ns_sum}
    return make_point(ts, 1, r.model, r.version, counters, r.h_queue, r.h_total)
