"""The edge.agent.v1.AgentManagement servicer: translates messages to ModelManager calls.

Errors are mapped to status codes in one place (:func:`edge_agent.frontends.grpc.status.abort`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from edge_agent import __version__
from edge_agent.config.management import RegistrySettings
from edge_agent.deploy import caller, compat
from edge_agent.deploy.errors import disk_full, is_disk_full
from edge_agent.deploy.live_settings import parse_value
from edge_agent.deploy.manager import ModelManager
from edge_agent.deploy.outcome import DeployOutcome, StepEvent
from edge_agent.discovery import MANAGEMENT_API_VERSION
from edge_agent.errors import (
    InvalidInputError,
    QueueFullError,
    RequestTimeoutError,
    StateStoreError,
)
from edge_agent.frontends.grpc.status import abort, rpc_errors, rpc_stream_errors
from edge_agent.management import convert
from edge_agent.management.diagnostics import Diagnostics
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from edge_agent.management.identity import AgentIdentity
from edge_agent.management.wire import CALLER_METADATA, NO_TEMP
from edge_agent.metrics.recorder import LiveSample, MetricsRecorder
from edge_agent.metrics.store import MetricsStore

if TYPE_CHECKING:
    from packager.bundle.oci.client import TransferGuard

log = logging.getLogger(__name__)
_errors = rpc_errors(log, "management service")
_stream_errors = rpc_stream_errors(log, "management service")
"""Every handler's one error path (unary, streaming): the agent's errors to their codes."""

PROGRESS_EVERY_BYTES = 1 << 20
UPLOAD_IDLE_S = 60.0
"""An upload that sends nothing for this long is dropped (DEADLINE_EXCEEDED)."""
UPLOAD_TOTAL_S = 6 * 3600.0
"""An upload that takes longer than this in all is dropped (DEADLINE_EXCEEDED)."""
MAX_DEPLOYS = 4
"""Deploy streams served at once; more are refused (RESOURCE_EXHAUSTED)."""
_QUEUED_CHUNKS = 4  # chunks read ahead of the disk at most (each <= the 8 MiB message cap)
_MAX_UNIX_S = float(2**40)  # far past any real clock, far inside SQLite's int64


def _caller_of(context: grpc.ServicerContext,
               peer_of: Callable[[str], str] = lambda p: p) -> str:
    """The caller's own description (``x-edge-caller``) and its address, for the log;
    ``peer_of`` turns the relay's peer into the client's address (the connection gate's)."""
    claimed = next((str(v) for k, v in (context.invocation_metadata() or ())
                    if k == CALLER_METADATA), None)
    return caller.describe(claimed, peer_of(context.peer() or "an unknown address"))


class ManagementServicer(pb_grpc.AgentManagementServicer):
    """Serves one agent's management calls (auth is done by the interceptor before this)."""

    def __init__(self, manager: ModelManager, identity: AgentIdentity, *,
                 metrics: MetricsStore | None = None,
                 recorder: MetricsRecorder | None = None,
                 on_change: Callable[[], None] | None = None, max_watchers: int = 8,
                 max_deploys: int = MAX_DEPLOYS, upload_idle_s: float = UPLOAD_IDLE_S,
                 upload_total_s: float = UPLOAD_TOTAL_S,
                 diagnostics: Diagnostics | None = None,
                 registry: RegistrySettings | None = None) -> None:
        self.manager = manager
        self.diagnostics = diagnostics or Diagnostics(None, None, metrics)
        self.registry = registry or RegistrySettings()
        # each Deploy stream holds a server thread while it uploads: cap them too
        self._deploys = threading.BoundedSemaphore(max_deploys)
        self.max_deploys = max_deploys
        self.upload_idle_s = upload_idle_s
        self.upload_total_s = upload_total_s
        # each WatchMetrics stream holds a server thread: cap them so calls still get one
        self._watchers = threading.BoundedSemaphore(max_watchers)
        self.max_watchers = max_watchers
        self.identity = identity
        self.metrics = metrics
        self.recorder = recorder
        self._on_change = on_change
        # deploys by reference being pulled: their guards (stopped when the agent stops)
        self._pulls: dict[TransferGuard, tuple[threading.Thread, Path]] = {}
        self._pulls_lock = threading.Lock()
        self._stopping = False
        self.peer_of: Callable[[str], str] = lambda peer: peer
        """The client's address behind a call's peer (set by the server to its gate's)."""

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception:  # an advert update must never fail a deploy
                log.exception("change hook failed")

    # -- inspection ----------------------------------------------------------------------------
    def GetInfo(self, request: pb.GetInfoRequest, context: grpc.ServicerContext) -> pb.AgentInfo:
        d, s, i = self.manager.device, self.manager.settings, self.identity
        return pb.AgentInfo(agent_id=i.agent_id, name=i.name, host=i.host, arch=d.arch,
                            profile=d.profile, runtimes=list(d.runtimes),
                            agent_version=__version__, uptime_s=i.uptime_s,
                            api_version=MANAGEMENT_API_VERSION,
                            inference_address=i.inference_address,
                            allow_unsigned=s.allow_unsigned, keep_versions=s.keep_versions,
                            memory_budget_bytes=self.manager.plane.budget_bytes or 0,
                            memory_used_bytes=self.manager.plane.used_bytes())

    @_errors
    def ListModels(self, request: pb.ListModelsRequest,
                   context: grpc.ServicerContext) -> pb.ListModelsResponse:
        views = self.manager.versions(request.model or None)
        return pb.ListModelsResponse(versions=[convert.version_pb(v) for v in views])

    def ListDeployments(self, request: pb.ListDeploymentsRequest,
                        context: grpc.ServicerContext) -> pb.ListDeploymentsResponse:
        deps = self.manager.history(request.model or None, request.limit or 50)
        return pb.ListDeploymentsResponse(deployments=[convert.deployment_pb(d) for d in deps])

    # -- changes -------------------------------------------------------------------------------
    @_stream_errors
    def Deploy(self, request_iterator: Iterator[pb.DeployRequest],
               context: grpc.ServicerContext) -> Iterator[pb.DeployEvent]:
        if not self._deploys.acquire(blocking=False):
            raise QueueFullError(
                f"this agent already receives {self.max_deploys} deploys; retry when one "
                "has finished")
        try:
            with caller.acting_as(_caller_of(context, self.peer_of)):
                yield from self._deploy(_timed(request_iterator, context, self.upload_idle_s,
                                               self.upload_total_s), context)
        finally:
            self._deploys.release()

    def _deploy(self, request_iterator: Iterator[pb.DeployRequest],
                context: grpc.ServicerContext) -> Iterator[pb.DeployEvent]:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidInputError("the first Deploy message must be the header "
                                    "(file name, size)")
        header = first.header
        if header.size_bytes <= 0:
            raise InvalidInputError(f"the Deploy header declares {header.size_bytes} "
                                    "bytes; declare the bundle's size in bytes")
        # too big, a full disk or a read-only state dir: refused at once
        compat.check_upload_size(header.size_bytes)
        path = self.manager.new_upload_path()
        try:
            yield from self._receive(request_iterator, path, header, context)
        except BaseException:
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        # From here the deploy thread owns the file (and deletes it when done).
        yield from self._run_deploy(path, header.force, context, header.filename)

    @_stream_errors
    def DeployReference(self, request: pb.DeployReferenceRequest,
                        context: grpc.ServicerContext) -> Iterator[pb.DeployEvent]:
        """Pull the bundle for this device from the registry (the agent's own [registry]
        settings), then the same pipeline as an upload."""
        from edge_agent.deploy.registry_source import check_reference

        registry = self.registry  # one deploy, one set of settings (SIGHUP may replace them)
        check_reference(request.reference, registry)  # refused before any pull
        if not self._deploys.acquire(blocking=False):
            raise QueueFullError(
                f"this agent already receives {self.max_deploys} deploys; retry when one "
                "has finished")
        try:
            path = self.manager.new_upload_path()
            with caller.acting_as(_caller_of(context, self.peer_of)):
                yield from self._pull(request.reference, registry, path, context)
                yield from self._run_deploy(path, request.force, context, "bundle",
                                            origin=request.reference)
        finally:
            self._deploys.release()

    def stop_pulls(self, wait_s: float = 5.0) -> None:
        """End every pull under way (the agent is stopping): each one's socket is shut down,
        its partial file removed and its caller told; wait up to ``wait_s`` for them."""
        with self._pulls_lock:
            self._stopping = True
            pulls = dict(self._pulls)
        for guard in pulls:
            guard.stop("the agent is stopping; deploy again once it is back")
        deadline = time.monotonic() + wait_s
        for thread, path in pulls.values():
            thread.join(max(0.0, deadline - time.monotonic()))
            with contextlib.suppress(OSError):  # still blocked: its file goes anyway
                path.unlink()

    def _pull(self, reference: str, registry: RegistrySettings, path: Path,
              context: grpc.ServicerContext) -> Generator[pb.DeployEvent, None, None]:
        """Pull on a worker thread, yielding progress every MiB; abort on failure."""
        from edge_agent.deploy.registry_source import (
            PullStoppedError,
            pull_for_device,
            pull_guard,
        )

        events: queue.Queue[tuple[int, int] | BaseException | None] = queue.Queue()
        reported = [0]
        gone = threading.Event()  # the caller went away: stop pulling (the file is removed)
        guard = pull_guard(registry)
        # the RPC ended (cancelled, past its deadline): end the pull at once, not at its next
        # byte (a no-op once the pull is over)
        context.add_callback(lambda: guard.stop("the caller cancelled the deploy"))

        def progress(got: int, total: int) -> None:
            if gone.is_set():
                raise InvalidInputError("the caller cancelled the deploy")
            if got - reported[0] >= PROGRESS_EVERY_BYTES or got == total:
                reported[0] = got
                events.put((got, total))

        def run() -> None:
            try:
                pull_for_device(reference, registry, self.manager.device, path,
                                on_progress=progress, guard=guard)
            except BaseException as exc:  # handed to the RPC thread below
                events.put(exc)
                return
            finally:
                with self._pulls_lock:
                    self._pulls.pop(guard, None)
            events.put(None)

        thread = threading.Thread(target=contextvars.copy_context().run, args=(run,),
                                  name="edge-pull", daemon=True)
        with self._pulls_lock:
            if self._stopping:
                abort(context, PullStoppedError("the agent is stopping; deploy again once "
                                                "it is back"))
            self._pulls[guard] = (thread, path)
        thread.start()
        try:
            while True:
                item = events.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    with contextlib.suppress(OSError):
                        path.unlink()
                    abort(context, item)
                yield pb.DeployEvent(progress=pb.UploadProgress(received_bytes=item[0],
                                                                total_bytes=item[1]))
        except GeneratorExit:
            gone.set()
            guard.stop("the caller cancelled the deploy")
            raise

    def CheckDeploy(self, request: pb.CheckDeployRequest,
                    context: grpc.ServicerContext) -> pb.CheckDeployResponse:
        m = self.manager
        target = compat.DeployTarget(
            device=m.device, trusted_keys=m.settings.trusted_keys,
            allow_unsigned=m.settings.allow_unsigned, models_dir=m.files.models_dir,
            state_dir=m.files.state_dir, active_version=m.store.active_version,
            memory=m.memory_check)
        label = compat.display_name(request.filename) or "bundle"
        result = compat.preflight(
            request.manifest, request.signature if request.HasField("signature") else None,
            request.size_bytes, target=target, force=request.force, label=label)
        return pb.CheckDeployResponse(ok=result.ok, message=result.message,
                                      refusal=result.refusal, model=result.name,
                                      version=result.version, backend=result.backend,
                                      key_id=result.key_id)

    def _receive(self, requests: Iterator[pb.DeployRequest], path: Path,
                 header: pb.DeployHeader, context: grpc.ServicerContext
                 ) -> Iterator[pb.DeployEvent]:
        received, reported = 0, 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        out = os.fdopen(fd, "wb")
        try:
            for req in requests:
                if req.WhichOneof("part") != "chunk":
                    raise InvalidInputError("only data chunks may follow the header")
                received += len(req.chunk)
                if received > header.size_bytes:
                    raise InvalidInputError(
                        f"the upload sent more than the {header.size_bytes} bytes its header "
                        "declared; declare the bundle's real size")
                out.write(req.chunk)
                if received - reported >= PROGRESS_EVERY_BYTES:
                    reported = received
                    yield pb.DeployEvent(progress=pb.UploadProgress(
                        received_bytes=received, total_bytes=header.size_bytes))
            out.flush()
            os.fsync(out.fileno())
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(f"store the upload ({received} of "
                                f"{header.size_bytes} bytes received)", path.parent) from exc
            raise StateStoreError(f"cannot store the upload in {path.parent}: "
                                  f"{exc.strerror or exc}") from exc
        finally:
            with contextlib.suppress(OSError):  # closing flushes: a full disk fails here too
                out.close()
        if received != header.size_bytes:
            raise InvalidInputError(f"the upload ended after {received} of the "
                                    f"{header.size_bytes} bytes its header declared")
        yield pb.DeployEvent(progress=pb.UploadProgress(received_bytes=received,
                                                        total_bytes=header.size_bytes))

    def _run_deploy(self, path: Path, force: bool, context: grpc.ServicerContext,
                    source: str = "", origin: str | None = None) -> Iterator[pb.DeployEvent]:
        events: queue.Queue[StepEvent | DeployOutcome | BaseException] = queue.Queue()

        def run() -> None:
            result: DeployOutcome | BaseException
            try:
                result = self.manager.deploy(path, force=force, on_event=events.put,
                                             source=source or None, origin=origin)
            except BaseException as exc:  # handed to the RPC thread below
                result = exc
            with contextlib.suppress(OSError):
                path.unlink()
            events.put(result)

        # The deploy runs to its end even when the client goes away mid-way.
        worker = threading.Thread(target=contextvars.copy_context().run, args=(run,),
                                  name="edge-deploy", daemon=True)
        worker.start()
        while True:
            item = events.get()
            if isinstance(item, StepEvent):
                yield pb.DeployEvent(step=convert.step_pb(item))
            elif isinstance(item, DeployOutcome):
                self._changed()
                yield pb.DeployEvent(result=convert.result_pb(item))
                return
            else:
                abort(context, item)

    @_errors
    def Activate(self, request: pb.ActivateRequest,
                 context: grpc.ServicerContext) -> pb.DeploymentResult:
        with caller.acting_as(_caller_of(context, self.peer_of)):
            outcome = self.manager.activate(request.model, int(request.version),
                                            force=request.force)
        self._changed()
        return convert.result_pb(outcome)

    @_errors
    def Rollback(self, request: pb.RollbackRequest,
                 context: grpc.ServicerContext) -> pb.DeploymentResult:
        with caller.acting_as(_caller_of(context, self.peer_of)):
            outcome = self.manager.rollback(request.model, int(request.to_version) or None)
        self._changed()
        return convert.result_pb(outcome)

    @_errors
    def RemoveVersion(self, request: pb.RemoveVersionRequest,
                      context: grpc.ServicerContext) -> pb.DeploymentResult:
        with caller.acting_as(_caller_of(context, self.peer_of)):
            outcome = self.manager.remove(request.model, int(request.version))
        self._changed()
        return convert.result_pb(outcome)

    # -- live settings and tuning --------------------------------------------------------------
    @_errors
    def GetModelSettings(self, request: pb.GetModelSettingsRequest,
                         context: grpc.ServicerContext) -> pb.ModelSettings:
        views = self.manager.model_settings(request.model)
        return pb.ModelSettings(model=request.model, settings=[
            pb.ModelSetting(key=v.key, value=v.value, source=v.source) for v in views])

    @_errors
    def SetModelSettings(self, request: pb.SetModelSettingsRequest,
                         context: grpc.ServicerContext) -> pb.DeploymentResult:
        with caller.acting_as(_caller_of(context, self.peer_of)):
            if request.revert:
                outcome = self.manager.revert_settings(request.model)
            else:
                values = {k: parse_value(v) for k, v in request.set.items()}
                outcome = self.manager.change_settings(request.model, values,
                                                       list(request.unset),
                                                       replace=request.replace)
        self._changed()
        return convert.result_pb(outcome)

    @_errors
    def RecordTuning(self, request: pb.TuningResult,
                     context: grpc.ServicerContext) -> pb.TuningResult:
        try:
            json.loads(request.data_json or "{}")
        except ValueError:
            raise InvalidInputError("RecordTuning data_json is not JSON") from None
        if not request.model:
            raise InvalidInputError("RecordTuning needs a model name")
        run_id = self.manager.store.add_tuning_result(request.model, request.summary,
                                                      request.data_json or "{}")
        return pb.TuningResult(id=run_id, model=request.model, at=time.time(),
                               summary=request.summary, data_json=request.data_json)

    def ListTuning(self, request: pb.ListTuningRequest,
                   context: grpc.ServicerContext) -> pb.ListTuningResponse:
        runs = self.manager.store.tuning_results(request.model or None,
                                                 latest_only=request.latest_only,
                                                 limit=request.limit or 50)
        return pb.ListTuningResponse(results=[
            pb.TuningResult(id=r.id, model=r.model, at=r.at, summary=r.summary,
                            data_json=r.data) for r in runs])

    # -- metrics -------------------------------------------------------------------------------
    @_errors
    def QueryMetrics(self, request: pb.QueryMetricsRequest,
                     context: grpc.ServicerContext) -> pb.QueryMetricsResponse:
        if self.metrics is None:
            return pb.QueryMetricsResponse()
        if not request.model:
            raise InvalidInputError("QueryMetrics needs a model name")
        for label, value in (("start", request.start), ("end", request.end)):
            if not math.isfinite(value) or not 0 <= value < _MAX_UNIX_S:
                raise InvalidInputError(
                    f"QueryMetrics {label} must be unix seconds (0 or a positive number below "
                    f"{_MAX_UNIX_S:.0f}), got {value!r}")
        if request.step_s < 0:
            raise InvalidInputError(f"QueryMetrics step_s must be >= 0 (0: 60 s), got "
                                    f"{request.step_s}")
        end = request.end or time.time()
        start = request.start or end - 3600
        step = request.step_s or 60
        if request.per_version:
            versions = sorted({v.version for v in self.manager.versions(request.model)})
            points = [p for v in versions
                      for p in self.metrics.query(request.model, start, end, step, version=v)]
        else:
            points = self.metrics.query(request.model, start, end, step)
        return pb.QueryMetricsResponse(points=[convert.point_pb(p) for p in points])

    @_stream_errors
    def WatchMetrics(self, request: pb.WatchMetricsRequest,
                     context: grpc.ServicerContext) -> Iterator[pb.MetricsSample]:
        if self.recorder is None:
            return
        if not self._watchers.acquire(blocking=False):
            raise QueueFullError(
                f"this agent already streams metrics to {self.max_watchers} watchers; close "
                "one (or use QueryMetrics)")
        samples, unsubscribe = self.recorder.subscribe_queue(maxsize=30)
        try:
            while context.is_active():
                try:
                    sample = samples.get(timeout=0.5)
                except queue.Empty:
                    continue
                yield _sample_pb(sample, request.model)
        finally:
            unsubscribe()
            self._watchers.release()

    # -- diagnostics ---------------------------------------------------------------------------
    def GetDoctor(self, request: pb.GetDoctorRequest,
                  context: grpc.ServicerContext) -> pb.DoctorReport:
        return self.diagnostics.doctor()

    @_errors
    def QuerySystemMetrics(self, request: pb.QuerySystemMetricsRequest,
                           context: grpc.ServicerContext) -> pb.QuerySystemMetricsResponse:
        return self.diagnostics.system(request, _MAX_UNIX_S)

    @_stream_errors
    def StreamLogs(self, request: pb.StreamLogsRequest,
                   context: grpc.ServicerContext) -> Iterator[pb.LogLine]:
        if not request.follow:
            yield from self.diagnostics.log_lines(request, context.is_active)
            return
        if not self._watchers.acquire(blocking=False):
            raise QueueFullError(
                f"this agent already streams to {self.max_watchers} watchers; close one (or "
                "read the log without --follow)")
        try:
            yield from self.diagnostics.log_lines(request, context.is_active)
        finally:
            self._watchers.release()


def _timed(requests: Iterator[pb.DeployRequest], context: grpc.ServicerContext,
           idle_s: float, total_s: float) -> Iterator[pb.DeployRequest]:
    """``requests`` read on a thread of their own, so that an upload that stalls (nothing for
    ``idle_s``) or drags on (longer than ``total_s``) ends with DEADLINE_EXCEEDED."""
    items: queue.Queue[object] = queue.Queue(_QUEUED_CHUNKS)
    done = threading.Event()
    end = object()

    def read() -> None:
        try:
            for req in requests:
                while not done.is_set():
                    try:
                        items.put(req, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if done.is_set():
                    return
        except Exception as exc:  # cancelled or broken: hand it to the handler thread
            item: object = exc
        else:
            item = end
        with contextlib.suppress(queue.Full):
            while not done.is_set():
                try:
                    items.put(item, timeout=0.5)
                    return
                except queue.Full:
                    continue

    threading.Thread(target=read, name="edge-upload-reader", daemon=True).start()
    deadline = time.monotonic() + total_s
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                item = items.get(timeout=max(0.0, min(idle_s, left)))
            except queue.Empty:
                why = (f"the upload took longer than {total_s:g} s" if left <= idle_s else
                       f"the upload sent nothing for {idle_s:g} s")
                abort(context, RequestTimeoutError(f"{why}; the partial upload was dropped, "
                                                   "deploy again"))
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]  # the queue holds events here (checked above)
    finally:
        done.set()


def _sample_pb(sample: LiveSample, model: str) -> pb.MetricsSample:
    points = [convert.point_pb(p) for p in sample.points if not model or p.model == model]
    msg = pb.MetricsSample(ts=sample.ts, points=points)
    s = sample.system
    if s is not None:
        msg.system.CopyFrom(pb.SystemSample(
            cpu_percent=s.cpu_percent, mem_percent=s.mem_percent, rss_bytes=s.rss_bytes,
            temp_c=NO_TEMP if s.temp_c is None else s.temp_c,
            disk_free_bytes=s.disk_free_bytes))
    return msg
