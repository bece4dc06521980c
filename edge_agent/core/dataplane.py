"""The protocol-free data plane: implements :class:`edge_agent.core.api.DataPlaneAPI`.

The gRPC servicers call these methods and translate; everything here works on numpy arrays
and dataclasses. ``submit`` validates synchronously and returns a ``concurrent.futures.Future``.
When called from a plain thread (a thread-pool gRPC server) and an instance is idle with nothing
queued, the request runs on the calling thread and the returned future is already done; from a
thread running an asyncio event loop it never runs inline, so the loop is never blocked.

With ``response_cache_bytes`` > 0, models whose overrides set ``response_cache`` answer a
request the version it was routed to has answered before from :mod:`edge_agent.core.cache`,
after routing and validation and before the batcher.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from pathlib import Path
from typing import TypeVar

from edge_agent import __version__
from edge_agent.core import planes
from edge_agent.core.api import ModelConfigInfo, RepositoryEntry, ServerMetadata
from edge_agent.core.batcher import DynamicBatcher
from edge_agent.core.cache import ResponseCache
from edge_agent.core.observer import InferenceObserver
from edge_agent.core.overrides import ModelOverrides
from edge_agent.core.repository import ModelRepository, ModelVersion, VersionState
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
    RequestTimeoutError,
)

_now = time.monotonic_ns

_running_loop = asyncio._get_running_loop  # C fast path: None on a thread without a loop

_ROUTE_ATTEMPTS = 3
"""Times a request is routed when the version it resolved to is unloading (a swap)."""

_A = TypeVar("_A")
_R = TypeVar("_R")


def _submit(batcher: DynamicBatcher, request: InferRequest, rows: int, timeout_us: int,
            caller_runs: bool) -> Future[InferResult]:
    return batcher.submit(request.inputs, rows, outputs=request.outputs,
                          request_id=request.id, timeout_us=timeout_us, caller_runs=caller_runs)


def _counted(responses: Iterator[InferResult], batcher: DynamicBatcher, rows: int,
             start: int) -> Iterator[InferResult]:
    """``responses`` passed through, the request counted in the model's statistics when the
    stream ends (a success once exhausted; a failure on an error or a caller that left). The
    time the caller takes a response is not the model's compute time."""
    compute = 0
    ok = False
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
    finally:
        close = getattr(responses, "close", None)
        if close is not None:
            close()
        batcher.record_stream(ok=ok, rows=rows, compute_ns=compute, total_ns=_now() - start)


def _infer(batcher: DynamicBatcher, request: InferRequest, rows: int, timeout_us: int,
           wait_s: float | None) -> InferResult:
    return batcher.infer(request.inputs, rows, outputs=request.outputs, request_id=request.id,
                         timeout_us=timeout_us, wait_s=wait_s)


class DataPlane:
    """Serves the model versions of one repository. Every method is thread-safe.

    ``caller_runs`` lets ``submit`` run a request on the calling thread when an instance is
    idle and nothing is queued (never on an event-loop thread). ``autoload`` loads every model
    on disk in the constructor; otherwise call :meth:`load_all`.
    """

    def __init__(self, state_dir: Path | str, *, observer: InferenceObserver | None = None,
                 overrides: Mapping[str, ModelOverrides] | None = None,
                 default_overrides: ModelOverrides | None = None, caller_runs: bool = True,
                 autoload: bool = True, drain_timeout_s: float = 30.0,
                 server_name: str = "edge-agent", response_cache_bytes: int = 0) -> None:
        self.repository = ModelRepository(state_dir, observer=observer, overrides=overrides,
                                          default_overrides=default_overrides,
                                          drain_timeout_s=drain_timeout_s)
        self._caller_runs = caller_runs
        self._server_name = server_name
        self._observer = observer
        self.response_cache = ResponseCache(response_cache_bytes) if response_cache_bytes > 0 \
            else None
        self._closed = False
        self._startup_done = threading.Event()
        planes.register(self.repository.models_dir, self)  # pipelines find their steps here
        if autoload:
            self.load_all()

    def load_all(self, only: Callable[[str, int], bool] | None = None) -> list[ModelVersion]:
        """Load every model version on disk, or those ``only(name, version)`` accepts (failed
        ones stay listed as UNAVAILABLE); then the data plane reports ready."""
        try:
            return self.repository.load_all(only)
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
        mv = self._described(name, version)
        assert mv.manifest is not None
        versions = tuple(v.version for v in self.repository.versions(name)
                         if v.state is VersionState.READY)
        return ModelMetadata(name=name, versions=versions or (mv.version,),
                             platform=triton_platform(mv.backend_name),
                             inputs=mv.manifest.inputs, outputs=mv.manifest.outputs,
                             max_batch_size=mv.manifest.batching.max_batch_size)

    def model_config(self, name: str, version: int | None = None) -> ModelConfigInfo:
        mv = self._described(name, version)
        assert mv.manifest is not None and mv.batching is not None
        return ModelConfigInfo(manifest=mv.manifest, backend=mv.backend_name,
                               instances=mv.batching.instances, device=mv.device)

    def _described(self, name: str, version: int | None) -> ModelVersion:
        mv = self.repository.lookup(name, version)
        if mv.manifest is None:
            raise ModelUnavailableError(
                f"model {name!r} version {mv.version} is {mv.state.value}"
                + (f": {mv.reason}" if mv.reason else ""))
        return mv

    # ------------------------------------------------------------------ inference
    def submit(self, request: InferRequest) -> Future[InferResult]:
        """Validate and enqueue ``request``; raises AgentError subclasses synchronously."""
        caller_runs = self._caller_runs and _running_loop() is None
        if self._cached(request.model):
            return self._on_current_version(request, self._submit_cached, caller_runs)
        return self._on_current_version(request, _submit, caller_runs)

    def infer(self, request: InferRequest, timeout_s: float | None = None) -> InferResult:
        """Blocking form of :meth:`submit` for thread-pool servers: validates, then runs the
        request on the calling thread when nothing else is in flight (no Future, no thread
        handoff), else waits for its batch. Raises AgentError subclasses."""
        if not self._caller_runs or _running_loop() is not None:
            future = self.submit(request)
            try:
                return future.result(timeout_s)
            except FutureTimeoutError:
                future.cancel()
                raise RequestTimeoutError(
                    f"model {request.model!r}: no answer within {timeout_s} s "
                    f"(request {request.id or '(no id)'})") from None
        if self._cached(request.model):
            return self._on_current_version(request, self._infer_cached, timeout_s)
        return self._on_current_version(request, _infer, timeout_s)

    def stream(self, request: InferRequest) -> Iterator[InferResult]:
        """The responses of a decoupled model to ``request``, produced as they are taken
        (:mod:`edge_agent.core.decoupled`). Validates now (raises AgentError subclasses); a
        failure while streaming raises from the iterator. A model that is not decoupled
        answers with its one response."""
        start = _now()
        mv = self.repository.resolve(request.model, request.version)
        if mv.streamer is None:
            return iter((self.infer(request),))
        try:
            rows = mv.signature.validate(request)  # type: ignore[union-attr]  # READY: set
        except AgentError:
            mv.batcher.record_rejected(_now() - start)  # type: ignore[union-attr]  # READY: set
            raise
        return _counted(mv.streamer.stream(request.inputs, request.id),
                        mv.batcher, rows, start)  # type: ignore[arg-type]  # READY: set

    # ------------------------------------------------------------------ response cache
    def _cached(self, model: str) -> bool:
        return self.response_cache is not None and \
            self.repository.overrides_for(model).response_cache

    def _lookup(self, batcher: DynamicBatcher, request: InferRequest,
                rows: int) -> tuple[bytes, InferResult | None]:
        """The request's cache key and, on a hit (counted), the cached answer."""
        cache = self.response_cache
        assert cache is not None
        model, version = batcher.model, batcher.version
        start = _now()
        key = cache.key(batcher, model, version, request.inputs, request.outputs)
        outputs = cache.get(key)
        took = _now() - start
        cache.record(model, version, hit=outputs is not None, ns=took)
        if outputs is None:
            return key, None
        if self._observer is not None:
            self._observer.record_cache_hit(model, version, rows=rows, total_ns=took)
        return key, InferResult(model=model, version=version, outputs=outputs, id=request.id)

    def _store(self, batcher: DynamicBatcher, key: bytes, result: InferResult) -> None:
        cache = self.response_cache
        assert cache is not None
        began = _now()
        cache.put(key, result.outputs)
        cache.add_miss_time(batcher.model, batcher.version, _now() - began)

    def _infer_cached(self, batcher: DynamicBatcher, request: InferRequest, rows: int,
                      timeout_us: int, wait_s: float | None) -> InferResult:
        """``_infer`` behind the response cache: the answer is stored before it returns."""
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

    def _on_current_version(self, request: InferRequest,
                            call: Callable[[DynamicBatcher, InferRequest, int, int, _A], _R],
                            arg: _A) -> _R:
        """``call(batcher, request, rows, timeout_us, arg)`` on the version ``request``
        resolves to, routing again when that version began unloading (or was replaced by a
        reload) after it was resolved; resolve() raises when the model is really gone. A
        request refused (invalid, queue full) counts as a failed request of that version."""
        start = _now()
        for _attempt in range(_ROUTE_ATTEMPTS):
            batcher, rows, timeout = self._route(request, start)
            try:
                return call(batcher, request, rows, timeout, arg)
            except ModelUnavailableError:
                continue
            except QueueFullError:
                batcher.record_rejected(_now() - start)
                raise
        raise ModelUnavailableError(f"model {request.model!r} is being swapped; retry")

    def _route(self, request: InferRequest, start: int) -> tuple[DynamicBatcher, int, int]:
        mv = self.repository.resolve(request.model, request.version)
        if mv.streamer is not None:  # a decoupled model answers only over a stream
            raise mv.streamer.refusal()
        try:
            rows = mv.signature.validate(request)  # type: ignore[union-attr]  # resolve() gives a READY version: all set
        except AgentError:  # a rejected request is a failed request of this version
            mv.batcher.record_rejected(_now() - start)  # type: ignore[union-attr]  # resolve() gives a READY version: all set
            raise
        batching = mv.batching
        timeout = request.timeout_us
        if timeout is None or not batching.allow_timeout_override:  # type: ignore[union-attr]  # resolve() gives a READY version: all set
            timeout = batching.default_timeout_us  # type: ignore[union-attr]  # resolve() gives a READY version: all set
        return mv.batcher, rows, timeout  # type: ignore[return-value]  # resolve() gives a READY version: all set

    # ------------------------------------------------------------------ statistics & repo
    def statistics(self, name: str | None = None,
                   version: int | None = None) -> list[ModelStats]:
        if name is not None and name not in self.repository.model_names():
            raise ModelNotFoundError(f"model {name!r} is not loaded")
        out = []
        for mv in self.repository.versions(name):
            if version is not None and mv.version != version:
                continue
            if mv.batcher is not None:
                stats = mv.batcher.snapshot_stats()
                if self.response_cache is not None:
                    cached = self.response_cache.stats(mv.name, mv.version)
                    stats.cache_hit, stats.cache_miss = cached.hit, cached.miss
                out.append(stats)
        if name is not None and version is not None and not out:
            raise ModelNotFoundError(f"model {name!r} has no loaded version {version}")
        return out

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        entries: dict[tuple[str, int], RepositoryEntry] = {}
        for name, versions in self.repository.scan().items():
            for v in versions:
                entries[(name, v)] = RepositoryEntry(name, v, VersionState.UNAVAILABLE.value,
                                                     "not loaded")
        for mv in self.repository.versions():
            entries[(mv.name, mv.version)] = RepositoryEntry(mv.name, mv.version,
                                                             mv.state.value, mv.reason)
        out = [entries[k] for k in sorted(entries)]
        if ready_only:
            out = [e for e in out if e.state == VersionState.READY.value]
        return out

    def load_model(self, name: str) -> None:
        self.repository.reload_model(name)

    def unload_model(self, name: str) -> None:
        self.repository.unload_model(name)

    def close(self) -> None:
        """Stop accepting requests, drain and unload every model."""
        self._closed = True
        self.repository.close()
        planes.unregister(self.repository.models_dir, self)
