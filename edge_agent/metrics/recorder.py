"""The metrics recorder: a deque append on the hot path, a writer thread aggregating each second.

:class:`MetricsRecorder` implements :class:`edge_agent.core.observer.InferenceObserver`. Its
``record_*`` methods only append one tuple to a ``collections.deque`` (atomic under the GIL, no
lock); once a second the writer thread drains the deques, aggregates them with numpy into one
row per model version (counters and latency histograms), writes them to the
:class:`MetricsStore`, samples the system, and feeds live subscribers.

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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from edge_agent.metrics.aggregate import BatchRecord, RequestRecord, aggregate
from edge_agent.metrics.store import MetricPoint, MetricsStore, SecondRow, make_point
from edge_agent.metrics.system import SystemSample, SystemSampler

log = logging.getLogger(__name__)

#: Requests buffered between two flushes at most (10 s at 100k req/s); beyond, the oldest drop.
MAX_BUFFERED = 1_000_000


@dataclass(frozen=True, slots=True)
class LiveSample:
    """What subscribers receive once a second: per model version points and a system sample."""

    ts: int
    points: tuple[MetricPoint, ...]
    system: SystemSample | None


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
        self._requests: deque[RequestRecord] = deque(maxlen=MAX_BUFFERED)
        self._batches: deque[BatchRecord] = deque(maxlen=MAX_BUFFERED)
        self._subs_lock = threading.Lock()
        self._subs: list[Callable[[LiveSample], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error_log = 0.0

    # -- the hot path (InferenceObserver) ------------------------------------------------------

    def record_request(self, model: str, version: int, *, ok: bool, rows: int, queue_ns: int,
                       compute_ns: int, total_ns: int) -> None:
        """Buffer one finished request (durations in int nanoseconds)."""
        self._requests.append((model, version, ok, rows, queue_ns, compute_ns, total_ns))

    def record_batch(self, model: str, version: int, batch_size: int, compute_ns: int) -> None:
        """Buffer one backend execution of ``batch_size`` rows."""
        self._batches.append((model, version, batch_size, compute_ns))

    # -- flushing ------------------------------------------------------------------------------

    def flush(self, ts: int | None = None) -> LiveSample:
        """Write everything counted since the last flush as second ``ts`` (default: now).

        Called by the writer thread each second; callable directly (tests, shutdown).
        """
        ts = int(time.time()) if ts is None else ts
        rows = aggregate(_drain(self._requests), _drain(self._batches))
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


def _drain(buffer: deque[RequestRecord] | deque[BatchRecord]) -> list:  # type: ignore[type-arg]
    """Take what is in ``buffer`` now; appends racing with this stay for the next drain."""
    pop = buffer.popleft
    return [pop() for _ in range(len(buffer))]


def _point(ts: int, r: SecondRow) -> MetricPoint:
    counters = {"requests": r.requests, "errors": r.errors, "rows": r.rows,
                "batches": r.batches, "batch_rows": r.batch_rows,
                "queue_ns_sum": r.queue_ns_sum, "compute_ns_sum": r.compute_ns_sum,
                "total_ns_sum": r.total_ns_sum}
    return make_point(ts, 1, r.model, r.version, counters, r.h_queue, r.h_total)
