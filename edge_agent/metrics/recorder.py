"""The metrics recorder: an int64 append on the hot path, a writer thread aggregating each second.

:class:`MetricsRecorder` implements :class:`edge_agent.core.observer.InferenceObserver`. Its
``record_*`` methods look up the model version's ``array('q')`` buffer and extend it by one
record (a C-level call, atomic under the GIL: no lock, no Python objects kept alive). Once a
second the writer thread swaps the buffers out, sums them with numpy into one row per model
version (counters and latency histograms), writes them to the :class:`MetricsStore`, samples
the system, and feeds live subscribers. A record appended to a buffer just after its swap (the
appending thread had fetched it before) is picked up at the next flush, so none is lost.

Wiring::

    store = MetricsStore.open(state_dir, retention_s=..., max_bytes=...)
    recorder = MetricsRecorder(store, system=SystemSampler(state_dir))
    recorder.start()                   # thread "edge-metrics-writer"
    plane = DataPlane(state_dir, observer=recorder)
    unsubscribe = recorder.subscribe(callback)   # WatchMetrics: callback(LiveSample) per second
    ...
    recorder.stop()                    # final flush, joins the thread; then store.close()
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import queue
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from edge_agent.metrics.aggregate import CACHE_HIT, REQUEST_FIELDS, aggregate
from edge_agent.metrics.store import MetricsStore, SecondRow, StoredMetricPoint, make_point
from edge_agent.metrics.system import SystemSample, SystemSampler

log = logging.getLogger(__name__)

#: Values buffered per model version between two flushes at most (2M requests, 80 MB): a bound
#: for when nothing flushes; beyond it, records are dropped.
MAX_BUFFERED = 2_000_000 * REQUEST_FIELDS

_Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class LiveSample:
    """What subscribers receive once a second: per model version points and a system sample."""

    ts: int
    points: tuple[StoredMetricPoint, ...]
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
        self._lock = threading.Lock()  # guards buffer creation and the swap, not appends
        self._flush_lock = threading.Lock()
        self._req: dict[_Key, array[int]] = {}
        self._bat: dict[_Key, array[int]] = {}
        # The previous generation's buffers and how much of each was consumed.
        self._prev_req: dict[_Key, tuple[array[int], int]] = {}
        self._prev_bat: dict[_Key, tuple[array[int], int]] = {}
        self._subs_lock = threading.Lock()
        self._subs: list[Callable[[LiveSample], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error_log = 0.0

    # -- the hot path (InferenceObserver) ------------------------------------------------------

    def record_request(self, model: str, version: int, *, ok: bool, rows: int, queue_ns: int,
                       compute_ns: int, total_ns: int) -> None:
        """Buffer one finished request (durations in int nanoseconds)."""
        buf = self._req.get((model, version))
        if buf is None:
            buf = self._buffer(False, model, version)
        if len(buf) < MAX_BUFFERED:
            try:  # noqa: SIM105 (try is free in 3.11; contextlib.suppress is not)
                buf.extend((ok, rows, queue_ns, compute_ns, total_ns))
            except (TypeError, OverflowError):
                pass  # a broken record must not fail the request; flush drops and logs it

    def record_cache_hit(self, model: str, version: int, *, rows: int, total_ns: int) -> None:
        """Buffer one request answered from the response cache: a request record whose ``ok``
        is :data:`CACHE_HIT` (aggregate.py counts it as a success and as a cache hit)."""
        buf = self._req.get((model, version))
        if buf is None:
            buf = self._buffer(False, model, version)
        if len(buf) < MAX_BUFFERED:
            try:  # noqa: SIM105
                buf.extend((CACHE_HIT, rows, 0, 0, total_ns))
            except (TypeError, OverflowError):
                pass

    def record_batch(self, model: str, version: int, batch_size: int, compute_ns: int) -> None:
        """Buffer one backend execution of ``batch_size`` rows."""
        buf = self._bat.get((model, version))
        if buf is None:
            buf = self._buffer(True, model, version)
        if len(buf) < MAX_BUFFERED:
            try:  # noqa: SIM105
                buf.append(batch_size)
            except (TypeError, OverflowError):
                pass

    def _buffer(self, batch: bool, model: str, version: int) -> array[int]:
        """The current generation's buffer for a key (created under the lock)."""
        with self._lock:
            return (self._bat if batch else self._req).setdefault((model, version), array("q"))

    # -- flushing ------------------------------------------------------------------------------

    def flush(self, ts: int | None = None) -> LiveSample:
        """Write everything counted since the last flush as second ``ts`` (default: now).

        Called by the writer thread each second; callable directly (tests, shutdown).
        """
        ts = int(time.time()) if ts is None else ts
        with self._flush_lock:
            with self._lock:
                req, self._req = self._req, {}
                bat, self._bat = self._bat, {}
            requests, self._prev_req = _take(req, self._prev_req)
            batches, self._prev_bat = _take(bat, self._prev_bat)
        rows = aggregate(requests, batches)
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
            self._safe(functools.partial(self.flush, ts))
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


def _take(current: dict[_Key, array[int]], previous: dict[_Key, tuple[array[int], int]]
          ) -> tuple[dict[_Key, list[array[int]]], dict[_Key, tuple[array[int], int]]]:
    """Copy what the swapped-out buffers hold, plus late appends to the generation before.

    Returns the copies per key and the new "previous generation" (buffer, consumed length).
    """
    taken: dict[_Key, list[array[int]]] = {}
    for key, (buf, used) in previous.items():
        if len(buf) > used:
            taken.setdefault(key, []).append(buf[used:])
    new_previous = {}
    for key, buf in current.items():
        snapshot = buf[:]  # one C-level copy; appends after it are taken next time
        new_previous[key] = (buf, len(snapshot))
        taken.setdefault(key, []).append(snapshot)
    return taken, new_previous


def _point(ts: int, r: SecondRow) -> StoredMetricPoint:
    counters = {"requests": r.requests, "errors": r.errors, "rows": r.rows,
                "batches": r.batches, "batch_rows": r.batch_rows,
                "queue_ns_sum": r.queue_ns_sum, "compute_ns_sum": r.compute_ns_sum,
                "total_ns_sum": r.total_ns_sum, "cache_hits": r.cache_hits}
    return make_point(ts, 1, r.model, r.version, counters, r.h_queue, r.h_total)
