"""The protocol-free data plane: implements :class:`edge_agent.core.api.DataPlaneAPI`.

The gRPC servicers call these methods and translate; everything here works on numpy arrays
and dataclasses. ``submit`` validates synchronously and returns a ``concurrent.futures.Future``.
When called from a plain thread (a thread-pool gRPC server) and an instance is idle with nothing
queued, the request runs on the calling thread and the returned future is already done; from a
thread running an asyncio event loop it never runs inline, so the loop is never blocked.

With ``response_cache_bytes`` > 0, versions that opt in (agent.toml's ``response_cache``, else
the bundle's manifest) answer a
request the version it was routed to has answered before from :mod:`edge_agent.core.cache`,
after routing and validation and before the batcher.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from pathlib import Path
from typing import NamedTuple, TypeAlias, TypeVar

from edge_agent import __version__
from edge_agent.backends.registry import CALLS_MODELS
from edge_agent.config.models import ModelOverrides
from edge_agent.core.api import ModelConfigInfo, RepositoryEntry, ServerMetadata
from edge_agent.core.batcher import DynamicBatcher, Together
from edge_agent.core.cache import ResponseCache
from edge_agent.core.deploy_port import DeployOperations
from edge_agent.core.gate import ExecutionGate
from edge_agent.core.hosting import ParentCall, PlaneHost
from edge_agent.core.observer import InferenceObserver
from edge_agent.core.orchestrator import LoadRaced, Orchestrator
from edge_agent.core.overrides import (
    batch_ceiling,
    effective_batching,
    load_timeout_s,
    policy_versions,
)
from edge_agent.core.repository import (
    LoadedVersion,
    ModelRepository,
    ServingState,
    VersionSlot,
    default_runtime_memory_limit,
)
from edge_agent.core.sequences import (
    Sequences,
    client_inputs,
    client_outputs,
    missing_id,
    stateless_refusal,
)
from edge_agent.core.tallies import LifecycleTotal
from edge_agent.core.types import (
    InferRequest,
    InferResult,
    ModelMetadata,
    ModelStats,
    triton_platform,
)
from edge_agent.errors import (
    AgentError,
    ModelNotFoundError,
    ModelUnavailableError,
    QueueFullError,
    RequestCancelledError,
    RequestTimeoutError,
    detached,
)
from packager.bundle.errors import PackagerError
from packager.bundle.manifest import BatchingConfig, Manifest
from packager.bundle.reader import load_extracted

_now = time.monotonic_ns

_running_loop = asyncio._get_running_loop  # C fast path: None on a thread without a loop

_ROUTE_ATTEMPTS = 3
"""Times a request is routed when the version it resolved to is unloading (a swap)."""
_SOURCES = {"measured on this device": "device", "measured by edge-pack build": "build",
            "artifact size (never measured)": "artifact"}
"""The orchestrator's memory figure sources, as ModelStats.memory_source names them."""

_A = TypeVar("_A")
_R = TypeVar("_R")
class _CacheKey(NamedTuple):
    """A request's response cache digest and the routing generation it was made with."""

    digest: bytes
    routing: int | None


_Call: TypeAlias = Callable[[DynamicBatcher, InferRequest, int, int, _A], _R]
"""What a request is run with on its version: ``call(batcher, request, rows, timeout_us, arg)``."""


def _submit(batcher: DynamicBatcher, request: InferRequest, rows: int, timeout_us: int,
            caller_runs: bool) -> Future[InferResult]:
    return batcher.submit(request.inputs, rows, outputs=request.outputs,
                          request_id=request.id, timeout_us=timeout_us, caller_runs=caller_runs,
                          priority=request.priority, caller=request.caller,
                          trace=request.trace)


def _counted(responses: Iterator[InferResult], batcher: DynamicBatcher, rows: int,
             start: int) -> Iterator[InferResult]:
    """``responses`` passed through, the request counted in the model's statistics when the
    stream ends (a success once exhausted; a failure on an error; a failure counted cancelled
    when the caller left: the iterator closed early, or gone before the model started). The
    time the caller takes a response is not the model's compute time."""
    compute = 0
    ok = cancelled = False
    try:
        while True:
            began = _now()
            try:
                result = next(responses)
            except StopIteration:
                compute += _now() - began
                ok = True
                return
            compute += _now() - began
            yield result
    except (GeneratorExit, RequestCancelledError):
        cancelled = True
        raise
    finally:
        close = getattr(responses, "close", None)
        if close is not None:
            close()
        batcher.record_stream(ok=ok, rows=rows, compute_ns=compute, total_ns=_now() - start,
                              cancelled=cancelled)


def _infer(batcher: DynamicBatcher, request: InferRequest, rows: int, timeout_us: int,
           wait_s: float | None) -> InferResult:
    return batcher.infer(request.inputs, rows, outputs=request.outputs, request_id=request.id,
                         timeout_us=timeout_us, wait_s=wait_s, priority=request.priority,
                         caller=request.caller, trace=request.trace)


class _Description(NamedTuple):
    """What metadata and config report of a version, loaded or (on-demand) not yet."""

    version: int
    manifest: Manifest  # with the batching it is (or will be) served with
    backend: str
    batching: BatchingConfig
    device: str


class DataPlane(DeployOperations):
    """Serves the model versions of one repository. Every method is thread-safe.

    The model manager reaches it only through :class:`~edge_agent.core.deploy_port.DeployPort`
    (implemented by the :class:`DeployOperations` base).

    ``caller_runs`` lets ``submit`` run a request on the calling thread when an instance is
    idle and nothing is queued (never on an event-loop thread). ``autoload`` loads every model
    on disk in the constructor; otherwise call :meth:`load_all`. ``max_concurrent_executions``
    bounds the backend executions running at once across every model (0: the core count),
    highest priority first (:mod:`edge_agent.core.gate`).
    """

    def __init__(self, state_dir: Path | str, *, observer: InferenceObserver | None = None,
                 overrides: Mapping[str, ModelOverrides] | None = None,
                 default_overrides: ModelOverrides | None = None, caller_runs: bool = True,
                 autoload: bool = True, drain_timeout_s: float = 30.0,
                 server_name: str = "edge-agent", response_cache_bytes: int = 0,
                 max_concurrent_executions: int = 0,
                 memory_budget_bytes: int | None = None) -> None:
        self.gate = ExecutionGate(max_concurrent_executions)
        self.repository = ModelRepository(state_dir, observer=observer, overrides=overrides,
                                          default_overrides=default_overrides,
                                          drain_timeout_s=drain_timeout_s, gate=self.gate)
        self.repository.host = PlaneHost(self)  # pipelines and Python models call models here
        self.repository.runtime_memory_limit_bytes = default_runtime_memory_limit(
            memory_budget_bytes)
        self.repository.memory_budgeted = memory_budget_bytes is not None
        self.sequences = Sequences()
        self.orchestrator = Orchestrator(self.repository, budget_bytes=memory_budget_bytes,
                                         drain_timeout_s=drain_timeout_s,
                                         sequences=self.sequences)
        self.repository.load_guard = self.orchestrator.loading
        self.repository.on_change = self.orchestrator.persist
        if memory_budget_bytes is not None or any(
                o.idle_unload_s for o in [*(overrides or {}).values(),
                                          default_overrides or ModelOverrides()]):
            self.orchestrator.start()
        self._caller_runs = caller_runs
        self._server_name = server_name
        self._observer = observer
        self.response_cache = ResponseCache(response_cache_bytes) if response_cache_bytes > 0 \
            else None
        self._drain_timeout_s = drain_timeout_s
        self._closed = False
        self._startup_done = threading.Event()
        if autoload:
            self.load_all()

    def load_all(self, only: Callable[[str, int], bool] | None = None) -> list[VersionSlot]:
        """Load every model version on disk, or those ``only(name, version)`` accepts (failed
        ones stay listed as UNAVAILABLE); then the data plane reports ready."""
        try:
            return self.repository.load_all(
                lambda n, v: (only is None or only(n, v))
                and self.repository.overrides_for(n).load != "on-demand")
        finally:
            self._startup_done.set()

    # ------------------------------------------------------------------ health
    def live(self) -> bool:
        return not self._closed

    def ready(self) -> bool:
        """True once startup loading has finished and until close()."""
        return not self._closed and self._startup_done.is_set()

    def server_metadata(self) -> ServerMetadata:
        # the protocol edge lists the protocol extensions it serves (protocol/servicer.py)
        return ServerMetadata(name=self._server_name, version=__version__, extensions=())

    def model_ready(self, name: str, version: int | None = None) -> bool:
        try:
            self.repository.resolve(name, version)
        except (ModelNotFoundError, ModelUnavailableError):
            return False
        return True

    def model_metadata(self, name: str, version: int | None = None) -> ModelMetadata:
        d = self._described(name, version)
        versions = tuple(v.version for v in self.repository.versions(name)
                         if v.state is ServingState.READY)
        return ModelMetadata(name=name, versions=versions or (d.version,),
                             platform=triton_platform(d.backend),
                             inputs=client_inputs(d.manifest),
                             outputs=client_outputs(d.manifest),
                             max_batch_size=d.manifest.batching.max_batch_size)

    def model_config(self, name: str, version: int | None = None) -> ModelConfigInfo:
        d = self._described(name, version)
        return ModelConfigInfo(manifest=d.manifest, backend=d.backend,
                               instances=d.batching.instances, device=d.device)

    def _described(self, name: str, version: int | None) -> _Description:
        try:
            slot = self.repository.lookup(name, version)
        except ModelNotFoundError:
            unloaded = self._unloaded_version(name, version)
            if unloaded is None:
                raise
            return unloaded
        lv = slot.loaded
        if lv is None:
            raise ModelUnavailableError(
                f"model {name!r} version {slot.version} is {slot.state.value}"
                + (f": {slot.reason}" if slot.reason else ""))
        return _Description(lv.version, lv.manifest, lv.backend_name, lv.batching, lv.device)

    def _unloaded_version(self, name: str, version: int | None) -> _Description | None:
        """A model that requests load, described from its manifest on disk (metadata and
        config answer before the first request loads it); None otherwise."""
        if not self.orchestrator.loads_on_request(name):
            return None
        v = version if version is not None else self.orchestrator.version_to_load(name)
        if v is None:
            return None
        path = self.repository.models_dir / name / str(v)
        try:
            manifest = load_extracted(path, verify_hashes=False)
        except (PackagerError, OSError):
            return None
        batching = effective_batching(manifest.batching, self.repository.overrides_for(name),
                                      batch_ceiling(manifest))
        return _Description(v, dataclasses.replace(manifest, batching=batching),
                            manifest.backend, batching, "")

    # ------------------------------------------------------------------ inference
    def submit(self, request: InferRequest, *, inline: bool = True) -> Future[InferResult]:
        """Validate and enqueue ``request``; raises AgentError subclasses synchronously.
        ``inline=False``: never run on the calling thread."""
        if request.sequence is not None:
            return self._submit_sequence(request)
        caller_runs = inline and self._caller_runs and _running_loop() is None
        cached = self._submit_cached if self.response_cache is not None else None
        return self._on_current_version(request, _submit, caller_runs, cached)

    def infer(self, request: InferRequest, timeout_s: float | None = None) -> InferResult:
        """Blocking form of :meth:`submit` for thread-pool servers: validates, then runs the
        request on the calling thread when nothing else is in flight (no Future, no thread
        handoff), else waits for its batch. Raises AgentError subclasses.

        Called by an execution that holds a gate slot (a Python model's ``ctx.infer``), the
        slot is given up while the nested request runs."""
        if self.gate.holds():
            with self.gate.yielded():
                return self._infer(request, timeout_s)
        return self._infer(request, timeout_s)

    def infer_together(self, requests: Sequence[InferRequest]
                       ) -> list[InferResult | AgentError]:
        """Requests a front end took up together (the gRPC inference lane: those ready at
        once), each answered as :meth:`infer` answers it, in order: its InferResult or its
        AgentError (never raised for one request). Those that reach one version with nothing
        in flight run as one execution on the calling thread
        (:meth:`DynamicBatcher.infer_together`); a stateful request, or one a response cache
        may answer, goes through :meth:`infer`."""
        answers: list[InferResult | AgentError | None] = [None] * len(requests)
        groups: dict[int, tuple[DynamicBatcher, list[int], list[Together]]] = {}
        start = _now()
        for i, request in enumerate(requests):
            if request.sequence is not None or not self._caller_runs:
                answers[i] = self._answer(request)
                continue
            try:
                batcher, rows, timeout, caches = self._route(request, start)
            except ModelUnavailableError:  # being swapped: infer routes it again
                answers[i] = self._answer(request)
                continue
            except AgentError as exc:
                answers[i] = detached(exc)
                continue
            if caches and self.response_cache is not None:
                answers[i] = self._answer(request)
                continue
            group = groups.get(id(batcher))
            if group is None:
                group = groups[id(batcher)] = (batcher, [], [])
            group[1].append(i)
            group[2].append(Together(request.inputs, rows, request.outputs, request.id,
                                     timeout, request.priority, request.caller, request.trace))
        for batcher, indices, together in groups.values():
            done = batcher.infer_together(together)
            for i, answer in zip(indices, done, strict=True):
                if isinstance(answer, ModelUnavailableError):  # it began unloading
                    answer = self._answer(requests[i])
                elif isinstance(answer, QueueFullError):  # refused: a failed request
                    batcher.record_rejected(_now() - start)
                answers[i] = answer
        return answers  # type: ignore[return-value]  # every request answered above

    def _answer(self, request: InferRequest) -> InferResult | AgentError:
        """:meth:`infer`'s answer to ``request``, its AgentError returned, not raised."""
        try:
            return self.infer(request)
        except AgentError as exc:
            return detached(exc)

    def runs_now(self, name: str, version: int | None = None) -> bool:
        """Whether a request for ``name`` would run at once on the calling thread, in
        microseconds (:attr:`DynamicBatcher.runs_now`; never for a stateful or decoupled
        model, nor an unknown one): a hint for a front end choosing where to run it."""
        try:
            lv = self.repository.resolve(name, version)
        except AgentError:
            return False
        if lv.manifest.sequence is not None or lv.streamer is not None:
            return False
        return lv.batcher.runs_now

    def unload_version(self, name: str, version: int, *,
                       drain_timeout_s: float | None = None) -> bool:
        """:meth:`DeployOperations.unload_version`, after the version's live sequences have
        ended (within the same drain timeout; those still live then are ended)."""
        timeout = self._drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        t0 = time.monotonic()
        ended = self.sequences.drain(name, version, timeout)
        left = max(0.0, timeout - (time.monotonic() - t0))
        return super().unload_version(name, version, drain_timeout_s=left) and ended

    def _submit_sequence(self, request: InferRequest) -> Future[InferResult]:
        """A stateful model's request, through its sequence (never the response cache)."""
        assert request.sequence is not None
        lv = self.repository.resolve(request.model, request.version)
        if lv.manifest.sequence is None:
            lv.batcher.record_rejected(0)
            raise stateless_refusal(request.model)
        if lv.streamer is not None:  # a decoupled one streams: DataPlane.stream
            raise lv.streamer.refusal()

        def run(req: InferRequest) -> Future[InferResult]:
            return self._on_current_version(req, _submit, False)

        return self.sequences.submit(request, request.sequence, lv.manifest, lv.version, run)

    def _infer(self, request: InferRequest, timeout_s: float | None) -> InferResult:
        if (not self._caller_runs or _running_loop() is not None
                or request.sequence is not None):
            future = self.submit(request)
            try:
                return future.result(timeout_s)
            except FutureTimeoutError:
                future.cancel()
                raise RequestTimeoutError(
                    f"model {request.model!r}: no answer within {timeout_s} s "
                    f"(request {request.id or '(no id)'})") from None
        cached = self._infer_cached if self.response_cache is not None else None
        return self._on_current_version(request, _infer, timeout_s, cached)

    def stream(self, request: InferRequest) -> Iterator[InferResult]:
        """The responses of a decoupled model to ``request``, produced as they are taken
        (:mod:`edge_agent.core.decoupled`). Validates now (raises AgentError subclasses); a
        failure while streaming raises from the iterator. A model that is not decoupled
        answers with its one response."""
        start = _now()
        lv = self.repository.resolve(request.model, request.version)
        if lv.streamer is None:
            return iter((self.infer(request),))
        if request.sequence is not None:
            if lv.manifest.sequence is None:
                lv.batcher.record_rejected(_now() - start)
                raise stateless_refusal(request.model)
            return self.sequences.stream(request, request.sequence, lv.manifest, lv.version,
                                         self._stream_pinned)
        return self._stream_on(lv, request, start)

    def _stream_pinned(self, request: InferRequest) -> Iterator[InferResult]:
        """A sequence's request streamed on the version it is pinned to."""
        lv = self.repository.resolve(request.model, request.version)
        return self._stream_on(lv, request, _now())

    def _stream_on(self, lv: LoadedVersion, request: InferRequest,
                   start: int) -> Iterator[InferResult]:
        assert lv.streamer is not None
        try:
            rows = lv.signature.validate(request)
        except AgentError:
            lv.batcher.record_rejected(_now() - start)
            raise
        parent = None
        if request.caller is not None and lv.batcher.backend.name in CALLS_MODELS:
            parent = request.trace if isinstance(request.trace, ParentCall) \
                else ParentCall(request.trace, request.caller)  # its calls inherit its caller
        return _counted(lv.streamer.stream(request.inputs, request.id, request.caller, parent),
                        lv.batcher, rows, start)

    # ------------------------------------------------------------------ response cache
    def _lookup(self, batcher: DynamicBatcher, request: InferRequest,
                rows: int) -> tuple[_CacheKey, InferResult | None]:
        """The request's cache key and, on a hit (counted), the cached answer."""
        cache = self.response_cache
        assert cache is not None
        model, version = batcher.model, batcher.version
        start = _now()
        routing = self._routing(batcher)
        key = cache.key(batcher, model, version, request.inputs, request.outputs, routing)
        outputs = cache.get(key)
        took = _now() - start
        cache.record(model, version, hit=outputs is not None, ns=took)
        if outputs is None:
            return _CacheKey(key, routing), None
        if self._observer is not None:
            self._observer.record_cache_hit(model, version, rows=rows, total_ns=took)
        return _CacheKey(key, routing), InferResult(model=model, version=version,
                                                    outputs=outputs, id=request.id)

    def _store(self, batcher: DynamicBatcher, key: _CacheKey, result: InferResult) -> None:
        cache = self.response_cache
        assert cache is not None
        began = _now()
        cache.put(key.digest, result.outputs, key.routing)
        cache.add_miss_time(batcher.model, batcher.version, _now() - began)

    def _routing(self, batcher: DynamicBatcher) -> int | None:
        """The repository's routing generation for a model that calls others, else None."""
        return self.repository.generation if batcher.backend.name in CALLS_MODELS else None

    def _infer_cached(self, batcher: DynamicBatcher, request: InferRequest, rows: int,
                      timeout_us: int, wait_s: float | None) -> InferResult:
        """``_infer`` behind the response cache (for versions that opt in): the answer is
        stored before it returns."""
        key, hit = self._lookup(batcher, request, rows)
        if hit is not None:
            return hit
        result = _infer(batcher, request, rows, timeout_us, wait_s)
        self._store(batcher, key, result)
        return result

    def _submit_cached(self, batcher: DynamicBatcher, request: InferRequest, rows: int,
                       timeout_us: int, caller_runs: bool) -> Future[InferResult]:
        """``_submit`` behind the response cache (a hit: an already finished future). A miss
        is stored when its answer comes (a done callback: a caller woken by the answer may
        look up before it is stored, and then misses too)."""
        key, hit = self._lookup(batcher, request, rows)
        if hit is not None:
            done: Future[InferResult] = Future()
            done.set_result(hit)
            return done
        future = _submit(batcher, request, rows, timeout_us, caller_runs)

        def store(finished: Future[InferResult]) -> None:
            if not finished.cancelled() and finished.exception() is None:
                self._store(batcher, key, finished.result())

        future.add_done_callback(store)
        return future

    def _on_current_version(self, request: InferRequest, call: _Call[_A, _R], arg: _A,
                            cached: _Call[_A, _R] | None = None) -> _R:
        """``call(batcher, request, rows, timeout_us, arg)`` on the version ``request``
        resolves to (``cached`` instead for a version that answers from the response cache),
        routing again when that version began unloading (or was replaced by a reload) after
        it was resolved; resolve() raises when the model is really gone. A request refused
        (invalid, queue full) counts as a failed request of that version."""
        start = _now()
        for _attempt in range(_ROUTE_ATTEMPTS):
            batcher, rows, timeout, caches = self._route(request, start)
            try:
                if caches and cached is not None:
                    return cached(batcher, request, rows, timeout, arg)
                return call(batcher, request, rows, timeout, arg)
            except ModelUnavailableError:
                continue
            except QueueFullError:
                batcher.record_rejected(_now() - start)
                raise
        raise ModelUnavailableError(f"model {request.model!r} is being swapped; retry")

    def _route(self, request: InferRequest,
               start: int) -> tuple[DynamicBatcher, int, int, bool]:
        """The version's batcher, the request's rows and timeout, and whether the version
        answers from the response cache."""
        try:
            lv = self.repository.resolve(request.model, request.version)
        except (ModelNotFoundError, ModelUnavailableError):
            loaded = self._load_for(request)
            if loaded is None:  # not a model that requests load
                raise
            lv = loaded
        lv.slot.last_used = time.monotonic()
        if lv.streamer is not None:  # a decoupled model answers only over a stream
            raise lv.streamer.refusal()
        if request.caller is not None and lv.batching.max_batch_size <= 1 \
                and lv.batcher.backend.name in CALLS_MODELS \
                and not isinstance(request.trace, ParentCall):
            # its nested calls inherit its caller (the batcher makes this the running trace);
            # only where an execution serves one request: a batch's children serve them all
            request.trace = ParentCall(request.trace, request.caller)
        if lv.manifest.sequence is not None and request.sequence is None:
            lv.batcher.record_rejected(_now() - start)
            raise missing_id(request.model)
        try:
            rows = lv.signature.validate(request)
        except AgentError:  # a rejected request is a failed request of this version
            lv.batcher.record_rejected(_now() - start)
            raise
        batching = lv.batching
        timeout = request.timeout_us
        if timeout is None or not batching.allow_timeout_override:
            timeout = batching.default_timeout_us
        return lv.batcher, rows, timeout, lv.response_cache

    def _load_for(self, request: InferRequest) -> LoadedVersion | None:
        """The version ``request`` goes to, loaded for it when its model loads on request
        (on-demand, or unloaded by the orchestrator); None when it does not. A request whose
        model is loading, or was unloaded again to make room before it was routed, waits for
        the next load, up to the model's ``load_timeout_ms``."""
        deadline = time.monotonic() + load_timeout_s(
            self.repository.overrides_for(request.model))
        while True:
            try:
                if self.orchestrator.acquire(request.model, request.version) is None:
                    return None  # (a load that failed or timed out raised; no claim is held)
            except LoadRaced:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)  # the version asked for was taken for room: wait again
                continue
            try:
                return self.repository.resolve(request.model, request.version)
            except (ModelNotFoundError, ModelUnavailableError):  # unloaded again: wait again
                if time.monotonic() > deadline:
                    raise ModelUnavailableError(
                        f"model {request.model!r} was unloaded to make room again and again "
                        "while it loaded, for longer than load_timeout_ms; retry") from None
                time.sleep(0.02)
            finally:
                self.orchestrator.release(request.model)

    # ------------------------------------------------------------------ statistics & repo
    def statistics(self, name: str | None = None,
                   version: int | None = None) -> list[ModelStats]:
        if name is not None and name not in self.repository.model_names():
            if self.orchestrator.loads_on_request(name) and name in self.repository.scan():
                return []  # listed, not loaded yet: nothing counted
            raise ModelNotFoundError(f"model {name!r} is not loaded")
        out = []
        for slot in self.repository.versions(name):
            mv = slot.loaded
            if version is not None and slot.version != version:
                continue
            if mv is not None:
                stats = mv.batcher.snapshot_stats()
                if self.response_cache is not None:
                    cached = self.response_cache.stats(mv.name, mv.version)
                    stats.cache_hit, stats.cache_miss = cached.hit, cached.miss
                figure, source = self.orchestrator.memory_of(mv.name, mv.version)
                stats.memory_bytes, stats.memory_source = figure, _SOURCES.get(source, "")
                out.append(stats)
        if name is not None and version is not None and not out:
            raise ModelNotFoundError(f"model {name!r} has no loaded version {version}")
        return out

    def lifecycle(self) -> list[LifecycleTotal]:
        return self.repository.lifecycle.totals()

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        entries: dict[tuple[str, int], RepositoryEntry] = {}
        for name, versions in self.repository.scan().items():
            for v in versions:
                entries[(name, v)] = RepositoryEntry(name, v, ServingState.UNAVAILABLE.value,
                                                     "not loaded")
        for name, versions in self.repository.scan().items():
            if self.repository.default_version(name) is None and versions:
                state, reason = self.orchestrator.not_loaded_reason(name)
                for v in versions:
                    entries[(name, v)] = RepositoryEntry(name, v, state, reason)
        for mv in self.repository.versions():
            reason = mv.reason
            if mv.state is ServingState.READY and mv.name in self.orchestrator.managed():
                stats = self.orchestrator.stats(mv.name)
                reason = (f"loaded on request: {stats.loads} load(s), {stats.waits} request(s) "
                          f"waited, the last {stats.last_wait_ns / 1e6:.0f} ms")
            entries[(mv.name, mv.version)] = RepositoryEntry(mv.name, mv.version,
                                                             mv.state.value, reason)
        out = [entries[k] for k in sorted(entries)]
        if ready_only:
            out = [e for e in out if e.state == ServingState.READY.value]
        return out

    def sequence_slots(self) -> dict[str, tuple[int, int]]:
        """Stateful models that have had sequences: name -> (slots held, slots)."""
        return self.sequences.slots()

    def load_model(self, name: str) -> None:
        """Load the versions on disk that ``name``'s ``version_policy`` names (without a model
        manager "active" is the highest); READY versions stay, others are unloaded."""
        policy = self.repository.overrides_for(name).version_policy
        on_disk = self.repository.scan().get(name, [])
        self.repository.reload_model(name, policy_versions(policy, on_disk, None))

    def unload_model(self, name: str) -> None:
        self.orchestrator.hold(name)
        self.repository.unload_model(name)

    def close(self) -> None:
        """Stop accepting requests, drain and unload every model."""
        self._closed = True
        self.sequences.close()
        self.orchestrator.close()
        self.repository.close()
