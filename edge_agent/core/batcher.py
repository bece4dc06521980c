"""The dynamic batcher of one model version: a bounded queue, per-caller futures, N instances.

Batches form greedily from what queued up while every instance was busy. A request that finds
nothing in flight and an idle instance runs at once: on the caller's thread when the caller allows
it (no thread handoff at all), otherwise on an idle worker; so one caller pays almost nothing over
a direct backend call, while concurrent callers queue and share executions. For a tiny model
(executions under ``parallel_min_ns``: the front end bounds it), an instance that comes free
with requests queued is handed to the blocked caller at the queue's head (a leader), whose own
thread forms and runs the batch for the callers behind it, then hands the instance on: no
batcher thread on the way and no wake-up for its own answer. Batcher threads run the batches of
larger models (batch after batch, no wake-up between them), those led by a Future (``submit``)
and a niced model's. ``max_queue_delay_us``
is only spent waiting for more rows (up to the smallest preferred batch size) when the batch
already holds more than one request and every instance is busy, and never longer than half of
a recent execution's compute time, so tiny models never idle an instance waiting. With several
instances a worker takes a fair share of the queue so that instances run in parallel.

Every piece of bookkeeping (queue, free instances, in-flight count, statistics) sits under one
lock that is never held while a backend runs.

With an execution timeout every execution gets a number (its identity) and a record in
``_running``; whoever pops that record first answers its callers: the thread that ran it when
the backend returns, or the watchdog when it runs past the timeout. The watchdog then cancels
the execution by its number, so a cancel can never hit the next execution on that instance.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, NamedTuple

import numpy as np

from edge_agent.backends.base import Backend, Cancellation
from edge_agent.backends.registry import CALLS_MODELS
from edge_agent.core.batching import merge_inputs, split_outputs
from edge_agent.core.gate import DEFAULT_PRIORITY, ExecutionGate, lower_thread_priority
from edge_agent.core.observer import InferenceObserver, NullObserver, RequestTrace, swap_trace
from edge_agent.core.tallies import LatencyWindow
from edge_agent.core.types import BatchStat, Caller, InferResult, ModelStats, PolledCaller
from edge_agent.errors import (
    AgentError,
    BackendError,
    InvalidInputError,
    ModelUnavailableError,
    QueueFullError,
    RequestCancelledError,
    RequestTimeoutError,
    detached,
)
from packager.bundle.manifest import BatchingConfig

log = logging.getLogger(__name__)
_now = time.monotonic_ns

PARALLEL_MIN_NS = 250_000
"""Executions shorter than this (moving average) run one at a time whatever the instance
count: the front end, not the runtime, bounds such models."""
_FLOOR_WINDOW = 256  # executions per window of the fastest-execution estimate
_wall_ns = time.time_ns


_CANCELLED = object()


class _Waiter:
    """What a blocked :meth:`DynamicBatcher.infer` caller waits on: a lock released once with
    the answer. Same ``set_result``/``set_exception``/``cancel`` as a Future for the workers,
    without a Future's condition and Python-level locking on both sides. The first of the
    answers and a cancel wins (``list.append`` is atomic); a later one raises
    InvalidStateError, as a Future's does."""

    __slots__ = ("_claim", "_lock", "lead")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._claim: list[Any] = []
        self.lead = -1  # an instance handed to the waiting caller to run a batch on itself

    def promote(self, instance: int) -> None:
        """Wake the waiting caller to run a batch on ``instance`` (batcher lock held; only
        for a waiter nobody answered or cancelled, whose request left the queue)."""
        self.lead = instance
        self._lock.release()

    def wait(self, timeout: float | None) -> bool:
        """Block until answered or promoted; False after ``timeout``."""
        return self._lock.acquire(timeout=-1 if timeout is None else timeout)

    def answer(self) -> InferResult:
        """The answer once :meth:`wait` returned for it (raises the request's error)."""
        result, error = self._claim[0]
        if error is not None:
            raise error
        return result  # type: ignore[no-any-return]  # _claim holds (InferResult, error) pairs

    def _settle(self, answer: Any) -> None:
        claim = self._claim
        claim.append(answer)
        if claim[0] is not answer:
            raise InvalidStateError("the request was answered or cancelled already")
        self._lock.release()

    def set_result(self, result: InferResult) -> None:
        self._settle((result, None))

    def set_exception(self, error: BaseException) -> None:
        self._settle((None, error))

    def cancel(self) -> bool:
        """Give up waiting; False when the answer came first."""
        self._claim.append(_CANCELLED)
        return self._claim[0] is _CANCELLED

    def result(self, timeout: float | None = None) -> InferResult:
        """The answer (raises the request's error); FutureTimeoutError after ``timeout``."""
        if not self.wait(timeout):
            raise FutureTimeoutError()
        return self.answer()


class Together(NamedTuple):
    """One validated request of :meth:`DynamicBatcher.infer_together` (the arguments of
    :meth:`DynamicBatcher.infer`)."""

    inputs: dict[str, np.ndarray]
    rows: int
    outputs: list[str] | None
    id: str
    timeout_us: int
    priority: int
    caller: Caller | None
    trace: RequestTrace | None


class _Kept:
    """Where :meth:`DynamicBatcher.infer_together` finds the answer of a request it ran on
    its own thread: the execution sets it before it returns, so no lock is needed."""

    __slots__ = ("error", "result")

    def __init__(self) -> None:
        self.result: InferResult | None = None
        self.error: AgentError | None = None

    def set_result(self, result: InferResult) -> None:
        self.result = result

    def set_exception(self, error: AgentError) -> None:
        self.error = error


class _Pending:
    """One queued request. ``queued`` is True from the moment it enters the queue until it
    leaves it (taken for a batch, withdrawn, or failed at close), all under the lock."""

    __slots__ = ("caller", "deadline", "enqueued", "future", "id", "inputs", "outputs",
                 "priority", "queued", "rows", "trace")

    def __init__(self, inputs: dict[str, np.ndarray], rows: int, outputs: list[str] | None,
                 request_id: str, enqueued: int, deadline: int,
                 future: Future[InferResult] | _Waiter | _Kept | None, priority: int,
                 caller: Caller | None = None, trace: RequestTrace | None = None) -> None:
        self.inputs = inputs
        self.rows = rows
        self.outputs = outputs
        self.id = request_id
        self.enqueued = enqueued
        self.deadline = deadline
        self.future = future
        self.priority = priority
        self.caller = caller
        self.queued = False
        self.trace = trace

    def gone(self, now: int) -> bool:
        """Past its deadline at ``now``, or its caller gone: never run."""
        return bool(self.deadline and now > self.deadline) or (
            self.caller is not None and not self.caller.is_active())


def _polled(caller: Caller | None) -> Caller | None:
    """What a queued request keeps to ask when an instance comes to it: only a
    :class:`PolledCaller`. Another caller's end runs a callback that withdraws the request (a
    gRPC call's ``is_active`` turns false at the moment its callbacks are collected, so asking
    it too would add nothing but a lock per request)."""
    return caller if type(caller) is PolledCaller else None


def _first_trace(batch: Sequence[_Pending]) -> RequestTrace | None:
    """The trace nested calls of ``batch``'s execution are made under (its first traced
    request's)."""
    for p in batch:
        if p.trace is not None:
            return p.trace
    return None


def _fail(batch: Sequence[_Pending], error: AgentError) -> None:
    """Answer every request of ``batch`` with ``error`` (skipping cancelled futures)."""
    for p in batch:
        if p.future is not None:
            with contextlib.suppress(InvalidStateError):
                p.future.set_exception(error)


# One execution the watchdog watches (only with an execution timeout), a list because one is
# made per execution (a list costs a tenth of a class instance): [start ns, instance, batch,
# the timeout error (set by the watchdog before it claims the execution), finished (set by
# the running thread when it returns after the watchdog claimed the execution)]
_Execution = list[Any]
_START, _INSTANCE, _BATCH, _ERROR, _FINISHED = range(5)


class _Worker:
    """A thread that runs batches on the instance it is handed; sleeps on its own lock."""

    __slots__ = ("instance", "thread", "wake")

    def __init__(self) -> None:
        self.instance: int | None = None
        self.wake = threading.Lock()
        self.wake.acquire()
        self.thread: threading.Thread | None = None


class DynamicBatcher:
    """Queues requests of one model version and runs them in batches on ``instances`` slots.

    ``submit`` returns a ``concurrent.futures.Future`` resolved with an InferResult (or an
    AgentError) so thread-pool and asyncio servers can both wait on it.
    """

    def __init__(self, backend: Backend, *, model: str, version: int, config: BatchingConfig,
                 observer: InferenceObserver | None = None,
                 execution_timeout_s: float = 0.0,
                 parallel_min_ns: int = PARALLEL_MIN_NS,
                 priority: int = DEFAULT_PRIORITY, gate: ExecutionGate | None = None,
                 nice: int = 0) -> None:
        self.backend = backend
        self.priority = priority  # of requests that name none (1 is the highest)
        self._gate = gate  # the device-wide limit on concurrent executions (None: no limit)
        self._gate_released = False
        self._nice = nice  # the workers' OS nice value (a background model's: above 0)
        if gate is not None:
            gate.register(priority)
        self.model = model
        self.version = version
        self.config = config
        # a model that calls models: its traced requests' calls are traced under them
        self._nests = backend.name in CALLS_MODELS
        # a NullObserver is skipped entirely on the hot path
        self._observer: InferenceObserver | None = (
            None if observer is None or isinstance(observer, NullObserver) else observer)
        self._input_names = [t.name for t in backend.inputs]
        self._batched = config.max_batch_size > 0
        self._max_rows = config.max_batch_size if self._batched else 1
        self._target_rows = (config.preferred_batch_sizes[-1] if config.preferred_batch_sizes
                             else self._max_rows)
        self._delay_ns = config.max_queue_delay_us * 1000
        self._infer_ewma_ns = 0  # moving average of one execution's compute time
        # the fastest execution of the last window: what the model costs without contention
        # (wall-clock times balloon when many threads wait for the GIL)
        self._floor_ns = 0
        self._floor_settled = False  # a whole window measured (before: the fastest so far)
        self._window_min_ns = 1 << 62
        self._window_n = 0
        self._parallel_min_ns = parallel_min_ns
        # under load a batch waits (up to the delay) until it holds this many rows
        self._fill_rows = (config.preferred_batch_sizes[0] if config.preferred_batch_sizes
                           else self._max_rows)
        self._max_queue = config.max_queue_size
        self._lock = threading.Lock()
        self._queue: deque[_Pending] = deque()
        instances = self._instances = max(1, config.instances)
        self._free: list[int] = list(range(instances - 1, -1, -1))
        self._idle: list[_Worker] = []
        self._fillers: list[_Worker] = []  # workers waiting for more rows under load
        self._inflight = 0
        self._drained = threading.Condition(self._lock)
        self._closed = False
        self.stats = ModelStats(name=model, version=version)
        self._recent = LatencyWindow()  # the last requests' durations, for quantiles
        self._workers = [_Worker() for _ in range(instances)]
        for i, w in enumerate(self._workers):
            self._idle.append(w)
            w.thread = threading.Thread(target=self._run_worker, args=(w,), daemon=True,
                                        name=f"batcher-{model}-v{version}-{i}")
            w.thread.start()
        # executions running now (execution number -> record); a watchdog answers the callers
        # of those past the execution timeout (a hung backend) and cancels them
        self._exec_timeout_s = execution_timeout_s if execution_timeout_s > 0 else 0.0
        self._exec_timeout_ns = int(self._exec_timeout_s * 1e9)
        self._execution_ids = itertools.count(1)
        self._running: dict[int, _Execution] = {}  # execution number -> record
        self._stop_watch = threading.Event()
        if self._exec_timeout_ns:
            threading.Thread(target=self._watchdog, daemon=True,
                             name=f"batcher-{model}-v{version}-watchdog").start()

    # ------------------------------------------------------------------ submit
    def submit(self, inputs: dict[str, np.ndarray], rows: int, *,
               outputs: list[str] | None = None, request_id: str = "",
               timeout_us: int = 0, caller_runs: bool = False,
               priority: int = 0, caller: Caller | None = None,
               trace: RequestTrace | None = None) -> Future[InferResult]:
        """Enqueue one validated request of ``rows`` rows (1 for an unbatched model).

        Raises QueueFullError when the queue is at its bound and ModelUnavailableError when the
        batcher is closed. With ``caller_runs`` a request that finds nothing in flight and an
        idle instance runs on the calling thread and the returned future is already done.
        ``priority`` (1 highest; 0: the model's) orders the queue and the wait for the gate.
        A request whose ``caller`` is gone is not run (RequestCancelledError): see
        :meth:`infer`. ``trace`` receives the request's timestamps (observer.RequestTrace).
        """
        now = _now()
        item = _Pending(inputs, rows, outputs, request_id, now,
                        now + timeout_us * 1000 if timeout_us > 0 else 0, None,
                        priority or self.priority, _polled(caller), trace)
        if caller is not None and not caller.is_active():
            raise self._gone_on_arrival(item)
        instance = self._admit(item, caller_runs)
        if instance < 0:
            if caller is not None and item.caller is None:
                self._watch(item, caller)
            return item.future  # type: ignore[return-value]  # _admit gave a queued item one
        # run here; the future is made only now, so nobody but this thread can answer it
        future: Future[InferResult] = Future()
        try:
            future.set_result(self._run_inline(item, instance))
        except AgentError as exc:
            future.set_exception(exc)
        return future

    def infer(self, inputs: dict[str, np.ndarray], rows: int, *,
              outputs: list[str] | None = None, request_id: str = "", timeout_us: int = 0,
              wait_s: float | None = None, priority: int = 0,
              caller: Caller | None = None, trace: RequestTrace | None = None) -> InferResult:
        """Blocking form of :meth:`submit` with ``caller_runs``: no Future at all when the
        request runs on the calling thread. Raises the request's AgentError.

        With a ``caller``, a request whose caller is gone (cancelled, past its deadline,
        disconnected) never runs: refused on arrival, taken out of the queue when the caller
        ends the call (its callback) or when an instance comes to it (polled), and answered
        with RequestCancelledError; counted in ``stats.cancel`` (and ``fail``, as Triton
        counts a cancelled request). One that started runs to its end."""
        now = _now()
        item = _Pending(inputs, rows, outputs, request_id, now,
                        now + timeout_us * 1000 if timeout_us > 0 else 0, None,
                        priority or self.priority, _polled(caller), trace)
        if caller is not None and not caller.is_active():
            raise self._gone_on_arrival(item)
        instance = self._admit(item, True, _Waiter)
        if instance >= 0:
            return self._run_inline(item, instance)
        if caller is not None and item.caller is None:
            self._watch(item, caller)
        future: _Waiter = item.future  # type: ignore[assignment]  # _admit gave it a waiter
        if not future.wait(wait_s):
            with self._lock:  # promotions happen under it: either promoted or cancelled
                promoted = future.lead >= 0
                cancelled = not promoted and future.cancel()
            if cancelled:
                self._withdraw(item)  # not run if it is still queued (counted cancelled)
                raise RequestTimeoutError(
                    f"model {self.model!r} version {self.version}: no answer within {wait_s} s "
                    f"(request {request_id or '(no id)'})") from None
            future.wait(None)  # answered or promoted as the wait ended: consume the wake
        if future.lead >= 0:  # this thread runs the batch: its own request and those queued
            instance, future.lead = future.lead, -1
            self._lead(item, instance)
            future.wait(None)  # answered by the batch it ran
        return future.answer()

    def infer_together(self, requests: Sequence[Together]) -> list[InferResult | AgentError]:
        """Validated requests a front end took up together (the gRPC inference lane: those
        ready at once), answered in order, each with its InferResult or its AgentError (never
        raised for one request). When nothing is in flight and an instance is free they run on
        the calling thread, their rows merged into executions of up to ``max_batch_size`` (one
        request an execution for an unbatched model); otherwise each goes through
        :meth:`infer`. Once the batcher is closed, those not run yet are answered with
        ModelUnavailableError (the caller routes them again)."""
        now = _now()
        answers: list[InferResult | AgentError | None] = [None] * len(requests)
        chunks: list[list[tuple[int, _Pending]]] = [[]]
        rows = 0
        for i, r in enumerate(requests):
            item = _Pending(r.inputs, r.rows, r.outputs, r.id, now,
                            now + r.timeout_us * 1000 if r.timeout_us > 0 else 0, _Kept(),
                            r.priority or self.priority, _polled(r.caller), r.trace)
            if r.caller is not None and not r.caller.is_active():
                answers[i] = self._gone_on_arrival(item)
                continue
            if chunks[-1] and rows + r.rows > self._max_rows:
                chunks.append([])
                rows = 0
            chunks[-1].append((i, item))
            rows += r.rows
        for chunk in chunks:
            if not chunk:
                continue
            with self._lock:
                closed = self._closed
                instance = self._free.pop() if not (
                    closed or self._inflight) and self._free else -1
                if instance >= 0:
                    self._inflight = len(chunk)
            if closed:
                for i, _ in chunk:
                    answers[i] = ModelUnavailableError(
                        f"model {self.model!r} version {self.version} is unloading; retry to "
                        f"reach the current version")
                continue
            if instance >= 0:
                self._execute([item for _, item in chunk], instance, release=True)
                for i, item in chunk:
                    kept: _Kept = item.future  # type: ignore[assignment]  # made a _Kept above
                    answers[i] = kept.result if kept.error is None else detached(kept.error)
                continue
            for i, _ in chunk:  # something else runs: each waits its turn as infer's do
                r = requests[i]
                try:
                    answers[i] = self.infer(r.inputs, r.rows, outputs=r.outputs,
                                            request_id=r.id, timeout_us=r.timeout_us,
                                            priority=r.priority, caller=r.caller,
                                            trace=r.trace)
                except AgentError as exc:
                    answers[i] = detached(exc)
        return answers  # type: ignore[return-value]  # every request answered above

    def _admit(self, item: _Pending, caller_runs: bool,
               waiter: type[Future[InferResult]] | type[_Waiter] = Future) -> int:
        """Count the request in flight; return an instance to run it on here, or queue it (-1)
        with a ``waiter`` (a Future, or a lighter one for a blocked caller) to answer it."""
        with self._lock:
            if self._closed:
                raise ModelUnavailableError(
                    f"model {self.model!r} version {self.version} is unloading; retry to reach "
                    f"the current version")
            if caller_runs and not self._inflight and self._free:
                self._inflight = 1
                return self._free.pop()
            queue = self._queue
            if len(queue) >= self._max_queue:
                raise QueueFullError(
                    f"model {self.model!r} version {self.version}: queue is full "
                    f"({self._max_queue} requests waiting); back off and retry")
            if item.future is None:
                item.future = waiter()
            if queue and queue[-1].priority > item.priority:
                # ahead of every lower priority, behind every request of its own or higher
                i = len(queue) - 1
                while i and queue[i - 1].priority > item.priority:
                    i -= 1
                queue.insert(i, item)
            else:
                queue.append(item)
            item.queued = True
            self._inflight += 1
            if self._free and self._idle and self._parallel_ok():
                worker = self._idle.pop()
                worker.instance = self._free.pop()
                worker.wake.release()
            elif self._fillers:
                worker = self._fillers.pop()
                worker.wake.release()
            return -1

    # ------------------------------------------------------------------ workers
    def _run_worker(self, worker: _Worker) -> None:
        lower_thread_priority(self._nice)
        lock = self._lock
        while True:
            worker.wake.acquire()
            instance = worker.instance
            if instance is None:
                return
            while True:
                with lock:
                    batch, expired = self._take_batch()
                    if not batch and not expired:
                        if self._closed:
                            worker.instance = None
                            self._free.append(instance)
                            return
                        self._free.append(instance)
                        worker.instance = None
                        self._idle.append(worker)
                        break
                if expired:
                    self._expire(expired)
                if not batch:
                    continue
                if self._delay_ns and len(batch) > 1:
                    batch = self._fill(worker, batch)
                    if not batch:
                        continue
                self._execute(batch, instance, release=False)

    def _lead(self, item: _Pending, instance: int) -> None:
        """Run, on the calling thread, the batch of promoted ``item`` (taken out of the queue
        by :meth:`_promote`) and what queued behind it; then hand ``instance`` on. No batcher
        thread on the way: one wake-up for the whole batch's leader, none for a worker."""
        batch = [item]
        dropped: list[_Pending] = []
        with self._lock:
            batch += self._take_more(item.rows, dropped)
            if self._queue and self._free and self._instances > 1 and self._parallel_ok():
                self._hand_on(self._free.pop())  # a second instance starts on the rest
        if dropped:
            self._expire(dropped)
        if self._delay_ns and len(batch) > 1:
            batch = self._fill(_Worker(), batch)  # drops the expired and the gone itself
        else:
            batch = self._without_gone(batch)
        if batch:
            self._execute(batch, instance, release=True)
        else:
            with self._lock:
                self._hand_on(instance)

    def _promote(self, instance: int) -> bool:
        """Hand ``instance`` to the caller blocked at the head of the queue, to run its batch
        on its own thread (lock held); False when the head is not a blocked caller, or the
        model is not a tiny one (see :meth:`_parallel_ok`: a compute-bound model's worker runs
        batch after batch without a wake-up between them), or its executions run niced."""
        head = self._queue[0]
        waiter = head.future
        if type(waiter) is not _Waiter or waiter._claim or self._nice or not (
                0 < self._floor_ns < self._parallel_min_ns):
            return False
        self._queue.popleft()
        head.queued = False
        waiter.promote(instance)
        return True

    def _hand_on(self, instance: int) -> None:
        """A free ``instance`` (lock held): to the queue's head caller, else to an idle worker
        when requests wait, else back to the free list."""
        if self._queue:
            if self._promote(instance):
                return
            if self._idle:
                w = self._idle.pop()
                w.instance = instance
                w.wake.release()
                return
        self._free.append(instance)

    def _take_batch(self) -> tuple[list[_Pending], list[_Pending]]:
        """Pop requests up to the target rows (lock held); split off requests past deadline
        and those whose caller is gone (both answered by :meth:`_expire`)."""
        queue = self._queue
        batch: list[_Pending] = []
        expired: list[_Pending] = []
        if not queue:
            return batch, expired
        now = _now()
        rows = 0
        target = self._target_rows
        free = self._free
        parallel = self._instances > 1 and self._parallel_ok()
        if parallel and self._batched:
            # take a fair share: idle instances start on the rest now, busy ones when they finish
            share = -(-len(queue) // self._instances)
            if share < target:
                target = share
        while queue and rows < target:
            item = queue[0]
            if item.gone(now):
                queue.popleft()
                item.queued = False
                expired.append(item)
                continue
            if rows + item.rows > self._max_rows:
                break
            queue.popleft()
            item.queued = False
            batch.append(item)
            rows += item.rows
            if not self._batched:
                break
        if queue and free and self._idle and parallel:
            worker = self._idle.pop()
            worker.instance = free.pop()
            worker.wake.release()
        return batch, expired

    def _parallel_ok(self) -> bool:
        """Whether a second execution may start while one runs (lock held).

        Not for a model whose fastest recent execution took less than ``parallel_min_ns``
        (the fastest, as wall-clock times under load include waits for the GIL): there a second
        instance only adds thread handoffs and GIL contention to requests the running one
        finishes sooner (measured on the MLP: 2 instances served 8% less than 1 at c=16).
        """
        return self._floor_ns == 0 or self._floor_ns >= self._parallel_min_ns \
            or len(self._free) == self._instances

    def _fill(self, worker: _Worker, batch: list[_Pending]) -> list[_Pending]:
        """Under load, wait up to max_queue_delay for more rows (never past the oldest's delay)."""
        # never wait longer than half of what an execution takes (tiny models: no wait at all)
        deadline = min(batch[0].enqueued + self._delay_ns, _now() + self._infer_ewma_ns // 2)
        rows = sum(p.rows for p in batch)
        dropped: list[_Pending] = []
        while rows < self._fill_rows:
            with self._lock:
                more = self._take_more(rows, dropped)
                if not more:
                    remaining = deadline - _now()
                    if remaining <= 0 or self._closed or self._free or (
                            self._queue and rows + self._queue[0].rows > self._max_rows):
                        break
                    self._fillers.append(worker)
            if more:
                batch.extend(more)
                rows += sum(p.rows for p in more)
                continue
            if not worker.wake.acquire(timeout=remaining / 1e9):
                with self._lock:
                    if worker in self._fillers:
                        self._fillers.remove(worker)
                        break
                # a submitter (or close) cleared us and released the wake lock: consume it
                worker.wake.acquire()
        if dropped:
            self._expire(dropped)
        return self._without_gone(batch)  # the wait may have outlived deadlines or callers

    def _without_gone(self, batch: list[_Pending]) -> list[_Pending]:
        """``batch`` less the requests past their deadline or whose caller is gone (answered
        by :meth:`_expire`, never run)."""
        now = _now()
        gone = [p for p in batch if p.gone(now)]
        if not gone:
            return batch
        self._expire(gone)
        ids = set(map(id, gone))
        return [p for p in batch if id(p) not in ids]

    def _take_more(self, rows: int, dropped: list[_Pending]) -> list[_Pending]:
        """More requests for a filling batch (lock held); those past their deadline or whose
        caller is gone go to ``dropped``."""
        queue = self._queue
        more: list[_Pending] = []
        while queue and rows + queue[0].rows <= self._max_rows and rows < self._target_rows:
            item = queue.popleft()
            item.queued = False
            if item.caller is not None and not item.caller.is_active():
                dropped.append(item)
                continue
            more.append(item)
            rows += item.rows
        return more

    # ------------------------------------------------------------------ execution
    def _run_inline(self, item: _Pending, instance: int) -> InferResult:
        """The caller-runs path: one request, no merge or split, on the calling thread."""
        gate = self._gate
        if gate is not None:
            gate.acquire(item.priority)
        t0 = _now()
        execution = 0
        if self._exec_timeout_ns:
            execution = next(self._execution_ids)
            record = self._running[execution] = [t0, instance, (item,), None, False]
        traced = item.trace is not None  # its nested calls (pipeline steps) are traced under it
        outer = swap_trace(item.trace) if traced else None
        try:
            result = self.backend.infer(item.inputs, instance, execution)
            error = None
        except AgentError as exc:
            error = self._named(exc)
        except Exception as exc:
            error = BackendError(f"model {self.model!r} version {self.version}: inference "
                                 f"failed: {type(exc).__name__}: {exc}")
        finally:
            if gate is not None:
                gate.release()
            if traced:
                swap_trace(outer)
        if execution and self._running.pop(execution, None) is None:
            error = self._claimed_by_watchdog(record)
        t1 = _now()
        self._account((item,), item.rows, t0, t0, t1, t1, error is None, instance)
        if error is not None:
            raise error
        if item.outputs is not None:
            try:
                result = {n: result[n] for n in item.outputs}
            except KeyError as exc:
                raise self._not_produced(exc) from None
        return InferResult(self.model, self.version, result, item.id)

    def _execute(self, batch: Sequence[_Pending], instance: int, *, release: bool) -> None:
        """Run ``batch`` on ``instance`` and answer every caller.

        ``release`` gives the instance back (caller-runs path); workers keep theirs.
        The gate slot (taken at the batch's highest priority) is held only around the backend.
        """
        gate = self._gate
        if gate is not None:
            gate.acquire(min(p.priority for p in batch) if len(batch) > 1 else batch[0].priority)
        t0 = _now()
        error: AgentError | None = None
        parts: list[dict[str, np.ndarray]] = []
        rows = [p.rows for p in batch]
        execution = 0
        try:
            merged = merge_inputs([p.inputs for p in batch], self._input_names)
            t1 = _now()
            if self._exec_timeout_ns:
                execution = next(self._execution_ids)
                record = self._running[execution] = [t1, instance, batch, None, False]
            nested = _first_trace(batch) if self._nests else None
            outer = swap_trace(nested) if nested is not None else None
            try:
                result = self.backend.infer(merged, instance, execution)
            finally:
                if nested is not None:
                    swap_trace(outer)
                if gate is not None:
                    gate.release()
                    gate = None
            t2 = _now()
            parts = split_outputs(result, rows)
        except AgentError as exc:
            error = self._named(exc)
            t1 = t2 = _now()
        except Exception as exc:  # a runtime bug must not kill the worker
            error = BackendError(f"model {self.model!r} version {self.version}: inference "
                                 f"failed: {type(exc).__name__}: {exc}")
            t1 = t2 = _now()
        if gate is not None:  # merge_inputs failed before the backend ran
            gate.release()
        model, version = self.model, self.version
        if execution and self._running.pop(execution, None) is None:
            error = self._claimed_by_watchdog(record)  # which answered every caller
        elif error is None:
            for p, part in zip(batch, parts, strict=True):
                if p.outputs is not None:
                    try:
                        part = {n: part[n] for n in p.outputs}
                    except KeyError as exc:
                        _fail((p,), self._not_produced(exc))
                        continue
                try:  # noqa: SIM105 - hot path: try is free, suppress() is not
                    p.future.set_result(InferResult(model, version, part, p.id))  # type: ignore[union-attr]  # queued: has a future
                except InvalidStateError:  # the caller cancelled its future
                    pass
        else:
            _fail(batch, error)
        t3 = _now()
        self._account(batch, sum(rows), t0, t1, t2, t3, error is None,
                      instance if release else -1)

    def _account(self, batch: Sequence[_Pending], rows: int, t0: int, t1: int, t2: int,
                 t3: int, ok: bool, release: int) -> None:
        """Statistics, in-flight count and (caller-runs) the instance, under one lock."""
        n = len(batch)
        input_ns, infer_ns, output_ns = t1 - t0, t2 - t1, t3 - t2
        if n == 1:
            queue_total = t0 - batch[0].enqueued
            total_sum = t3 - batch[0].enqueued
        else:
            enq = sum(p.enqueued for p in batch)
            queue_total = t0 * n - enq
            total_sum = t3 * n - enq
        with self._lock:
            s = self.stats
            if ok:
                self._infer_ewma_ns += (infer_ns - self._infer_ewma_ns) >> 3
                if infer_ns < self._window_min_ns:
                    self._window_min_ns = infer_ns
                    if not self._floor_settled:  # the first window: the fastest so far
                        self._floor_ns = infer_ns
                self._window_n += 1
                if self._window_n >= _FLOOR_WINDOW:
                    self._floor_ns = self._window_min_ns
                    self._floor_settled = True
                    self._window_min_ns, self._window_n = 1 << 62, 0
                d = s.success
                d.count += n
                d.ns += total_sum
                d = s.queue
                d.count += n
                d.ns += queue_total
                d = s.compute_input
                d.count += n
                d.ns += input_ns * n
                d = s.compute_infer
                d.count += n
                d.ns += infer_ns * n
                d = s.compute_output
                d.count += n
                d.ns += output_ns * n
                s.inference_count += rows
                s.execution_count += 1
                s.last_inference_ms = _wall_ns() // 1_000_000
                self._recent.add(batch, t0, infer_ns, t3)
                bs = s.batch_stats.get(rows)
                if bs is None:
                    bs = s.batch_stats[rows] = BatchStat(batch_size=rows)
                d = bs.compute_input
                d.count += 1
                d.ns += input_ns
                d = bs.compute_infer
                d.count += 1
                d.ns += infer_ns
                d = bs.compute_output
                d.count += 1
                d.ns += output_ns
            else:
                s.fail.add(total_sum, n)
            if release >= 0:  # after the estimates above: _hand_on reads them
                self._hand_on(release)
            self._inflight -= n
            if self._closed and self._inflight == 0:
                self._drained.notify_all()
        for p in batch:
            if p.trace is not None:
                self._traced(p.trace, p.enqueued, t0, t1, t2, t3, rows, ok)
        obs = self._observer
        if obs is not None:
            compute = t3 - t0
            model, version = self.model, self.version
            try:
                obs.record_batch(model, version, rows, infer_ns)
                for p in batch:
                    obs.record_request(model, version, ok=ok, rows=p.rows,
                                       queue_ns=t0 - p.enqueued, compute_ns=compute,
                                       total_ns=t3 - p.enqueued)
            except Exception:  # metrics must never take serving down
                log.exception("inference observer failed; metrics for %s v%s are incomplete",
                              model, version)

    def _traced(self, trace: RequestTrace, enqueued: int, t0: int, t1: int, t2: int, t3: int,
                rows: int, ok: bool) -> None:
        try:
            trace.executed(enqueued_ns=enqueued, start_ns=t0, compute_start_ns=t1,
                           compute_end_ns=t2, end_ns=t3, batch_size=rows, ok=ok)
        except Exception:  # tracing must never take serving down
            log.exception("request trace failed; the trace of %s v%s is incomplete",
                          self.model, self.version)

    def _expire(self, expired: list[_Pending]) -> None:
        """Answer and count requests taken out of the queue unrun: past their timeout
        (rejected), or their caller gone (cancelled)."""
        now = _now()
        cancelled: list[_Pending] = []
        timed_out: list[_Pending] = []
        for p in expired:
            waited_us = (now - p.enqueued) // 1000
            if p.caller is not None and not p.caller.is_active():
                cancelled.append(p)
                _fail((p,), self._cancelled_error(p, waited_us))
                continue
            timed_out.append(p)
            _fail((p,), RequestTimeoutError(
                f"model {self.model!r} version {self.version}: request {p.id or '(no id)'} "
                f"waited {waited_us} us in the queue, past its timeout of "
                f"{(p.deadline - p.enqueued) // 1000} us"))
        with self._lock:
            s = self.stats
            for p in expired:
                s.fail.add(now - p.enqueued)
            for p in cancelled:
                s.cancel.add(now - p.enqueued)
            for p in timed_out:
                s.rejected.add(now - p.enqueued)
            self._inflight -= len(expired)
            if self._inflight == 0 and self._closed:
                self._drained.notify_all()
        self._observe_unrun(expired, now)

    def _cancelled_error(self, p: _Pending, waited_us: int) -> RequestCancelledError:
        return RequestCancelledError(
            f"model {self.model!r} version {self.version}: request {p.id or '(no id)'} was "
            f"cancelled by its caller (cancelled, past its deadline or disconnected) after "
            f"{waited_us} us in the queue; it was not run")

    def _watch(self, item: _Pending, caller: Caller) -> None:
        """Withdraw queued ``item`` when its call ends (at once if it already has): for a
        caller that calls back (see :func:`_polled`)."""
        if not caller.add_callback(functools.partial(self._withdraw, item)):
            self._withdraw(item)

    def _withdraw(self, item: _Pending) -> None:
        """The call of ``item`` ended: if it is still queued (not started), take it out and
        answer it cancelled. A no-op for a request taken for a batch or answered (the call's
        normal end runs this too)."""
        if not item.queued:
            return
        now = _now()
        with self._lock:
            if not item.queued:
                return
            item.queued = False
            self._queue.remove(item)
            s = self.stats
            s.fail.add(now - item.enqueued)
            s.cancel.add(now - item.enqueued)
            self._inflight -= 1
            if self._inflight == 0 and self._closed:
                self._drained.notify_all()
        _fail((item,), self._cancelled_error(item, (now - item.enqueued) // 1000))
        self._observe_unrun((item,), now)

    def _gone_on_arrival(self, item: _Pending) -> RequestCancelledError:
        """Count a request whose caller left before it was queued; the error to raise."""
        with self._lock:
            self.stats.fail.add(0)
            self.stats.cancel.add(0)
        self._observe_unrun((item,), item.enqueued)
        return self._cancelled_error(item, 0)

    def _observe_unrun(self, items: Sequence[_Pending], now: int) -> None:
        """Tell the observer about requests answered without running."""
        for p in items if self._observer is not None else ():
            try:
                self._observer.record_request(self.model, self.version, ok=False, rows=p.rows,  # type: ignore[union-attr]  # the loop runs only with one
                                              queue_ns=now - p.enqueued, compute_ns=0,
                                              total_ns=now - p.enqueued)
            except Exception:
                log.exception("inference observer failed")

    # ------------------------------------------------------------------ lifecycle
    @property
    def inflight(self) -> int:
        """Requests accepted and not yet answered."""
        return self._inflight

    @property
    def runs_now(self) -> bool:
        """Whether a request would run at once on its caller's thread and in microseconds:
        nothing in flight, an instance free, and recent executions under ``parallel_min_ns``
        (a hint read without the lock, for a front end choosing where to run a request)."""
        return not self._inflight and bool(self._free) \
            and 0 < self._floor_ns < self._parallel_min_ns

    def record_rejected(self, elapsed_ns: int) -> None:
        """Count a request refused before it was queued (invalid input, full queue) as a
        failed request, as Triton's failure counters do."""
        elapsed_ns = max(0, int(elapsed_ns))
        with self._lock:
            self.stats.fail.add(elapsed_ns)
            self.stats.rejected.add(elapsed_ns)
        if self._observer is not None:
            try:
                self._observer.record_request(self.model, self.version, ok=False, rows=0,
                                              queue_ns=0, compute_ns=0, total_ns=elapsed_ns)
            except Exception:  # metrics must never take serving down
                log.exception("inference observer failed")

    def record_stream(self, *, ok: bool, rows: int, compute_ns: int, total_ns: int,
                      cancelled: bool = False) -> None:
        """Count one request to a decoupled model once its stream has ended: a success
        (inference and execution counted, the time its model took as compute) or a failure
        (an error mid-stream, or a caller that left: ``cancelled``, also counted in
        ``stats.cancel``), as Triton counts decoupled requests."""
        compute_ns, total_ns = max(0, int(compute_ns)), max(0, int(total_ns))
        with self._lock:
            s = self.stats
            if ok:
                s.success.add(total_ns)
                s.compute_infer.add(compute_ns)
                s.inference_count += rows
                s.execution_count += 1
                s.last_inference_ms = _wall_ns() // 1_000_000
            else:
                s.fail.add(total_ns)
                if cancelled:
                    s.cancel.add(total_ns)
        if self._observer is not None:
            try:
                self._observer.record_request(self.model, self.version, ok=ok, rows=rows,
                                              queue_ns=0, compute_ns=compute_ns,
                                              total_ns=total_ns)
            except Exception:  # metrics must never take serving down
                log.exception("inference observer failed")

    def snapshot_stats(self) -> ModelStats:
        """A consistent copy of this version's statistics."""
        import copy

        with self._lock:
            stats = copy.deepcopy(self.stats)
            stats.pending_count = len(self._queue)
            stats.recent_request_ns, stats.recent_queue_ns, stats.recent_compute_infer_ns = (
                self._recent.samples())
        return stats

    def _not_produced(self, missing: KeyError) -> InvalidInputError:
        """The answer to a request naming an output this execution left out (a pipeline's
        output written by a step its condition skipped)."""
        name = str(missing.args[0])
        step = getattr(self.backend, "optional_outputs", {}).get(name, "the step that writes it")
        return InvalidInputError(
            f"model {self.model!r}: output {name!r} was not produced for this request: {step} "
            "was skipped (its condition did not hold, or it reads what a skipped step writes); "
            "ask without naming it to get the outputs that were produced")

    def _named(self, exc: AgentError) -> AgentError:
        """A backend's error with this model's name and version in front, unless it has it."""
        if isinstance(exc, BackendError) and repr(self.model) not in str(exc):
            return type(exc)(f"model {self.model!r} version {self.version}: {exc}")
        return exc

    # ------------------------------------------------------------------ hung executions
    @staticmethod
    def _claimed_by_watchdog(record: _Execution) -> RequestTimeoutError:
        """The error the watchdog answered ``record``'s callers with (it popped the record
        first; it sets the error before popping)."""
        record[_FINISHED] = True
        error: RequestTimeoutError = record[_ERROR]
        return error

    def _timeout_error(self, instance: int, stopped: bool | None) -> RequestTimeoutError:
        """What happened to an execution past the timeout: ``stopped`` is what ``cancel``
        returned (None: not asked yet, or the backend cannot cancel)."""
        backend = self.backend
        if backend.cancellation is Cancellation.NONE:
            outcome = (f"the {backend.name} backend cannot cancel a running inference, so "
                       f"instance {instance} stays busy until it finishes (isolation = "
                       "\"process\" in the agent config replaces a hung instance)")
        elif stopped is False:
            outcome = ("it was not running in the backend when it was to be cancelled (it "
                       "finished at the timeout, or had not started); it is cancelled if it "
                       "runs on")
        elif backend.cancellation is Cancellation.KILL:
            outcome = (f"the runtime process of instance {instance} was killed and a new "
                       "one replaces it")
        else:
            outcome = f"the run was cancelled and instance {instance} serves the next request"
        return RequestTimeoutError(
            f"model {self.model!r} version {self.version}: the backend did not finish an "
            f"inference within the execution timeout of {self._exec_timeout_s:g} s; {outcome} "
            "(execution_timeout_ms in the agent config sets the limit)")

    def _watchdog(self) -> None:
        """Claim executions running past the timeout, cancel them, answer their callers."""
        period = min(0.25, self._exec_timeout_s / 4)
        limit = self._exec_timeout_ns
        backend = self.backend
        cancellable = backend.cancellation is not Cancellation.NONE
        running = self._running
        stopping: dict[int, _Execution] = {}  # claimed; cancel not confirmed yet: retried
        while not self._stop_watch.wait(period):
            now = _now()
            for execution, record in list(running.items()):
                if now - record[_START] < limit:
                    continue
                instance = record[_INSTANCE]
                record[_ERROR] = self._timeout_error(instance, None)
                if running.pop(execution, None) is None:
                    continue  # it just finished: the thread that ran it answers its callers
                if cancellable:
                    stopped = self._cancel(instance, execution)
                    record[_ERROR] = self._timeout_error(instance, stopped)
                    if not stopped:
                        stopping[execution] = record
                log.warning("%s", record[_ERROR])
                _fail(record[_BATCH], record[_ERROR])  # queued callers (inline ones wait)
            for execution, record in list(stopping.items()):
                if record[_FINISHED] or self._cancel(record[_INSTANCE], execution) is not False:
                    del stopping[execution]

    def _cancel(self, instance: int, execution: int) -> bool | None:
        """Ask the backend to stop ``execution``; None when asking failed."""
        try:
            return self.backend.cancel(instance, execution)
        except Exception:
            log.exception("model %r version %s: cancelling execution %d on instance %d failed",
                          self.model, self.version, execution, instance)
            return None

    def close(self, drain_timeout_s: float | None = 30.0) -> bool:
        """Refuse new requests, wait for in-flight ones (up to the timeout), stop the workers.

        Requests still queued after the timeout are answered with ModelUnavailableError.
        Returns True when everything in flight was answered before the timeout.
        """
        with self._lock:
            self._closed = True
            drained = self._drained.wait_for(lambda: self._inflight == 0, drain_timeout_s)
            leftover = list(self._queue)
            self._queue.clear()
            for p in leftover:
                p.queued = False
            self._inflight -= len(leftover)
            for w in self._idle:
                w.instance = None
                w.wake.release()
            self._idle.clear()
            for filler in self._fillers:
                filler.wake.release()
            self._fillers.clear()
        _fail(leftover, ModelUnavailableError(
            f"model {self.model!r} version {self.version} was unloaded before the request ran"))
        for w in self._workers:
            if w.thread is not None and w.thread is not threading.current_thread():
                w.thread.join(timeout=5.0)
        self._stop_watch.set()
        if self._gate is not None and not self._gate_released:
            self._gate_released = True
            self._gate.unregister(self.priority)
        return drained
