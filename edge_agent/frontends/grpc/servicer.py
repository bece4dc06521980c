"""The KServe v2 ``inference.GRPCInferenceService`` servicer over a :class:`DataPlaneAPI`.

Sync (thread-pool) handlers: measured faster than grpc.aio for this workload on a 2-core box
(see benchmarks/bench_serve.py). Each handler translates, calls the data plane, translates back;
every error goes through :mod:`edge_agent.frontends.grpc.status`.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeAlias

import grpc

from edge_agent.core.types import InferRequest, InferResult, PolledCaller
from edge_agent.errors import AgentError, DecoupledModelError, detached
from edge_agent.frontends.common import control as repository
from edge_agent.frontends.common.context import FrontendContext
from edge_agent.frontends.common.control import RepositoryControl
from edge_agent.frontends.common.logging_extension import (
    log_settings_call,
    trace_settings_call,
)
from edge_agent.frontends.common.names import model_name, parse_version
from edge_agent.frontends.common.shared_memory import (
    TCP_SETTING,
    Callers,
    Placement,
    SharedMemoryRegistry,
    refused_over_tcp,
)
from edge_agent.frontends.common.tensors import MAX_TENSORS
from edge_agent.frontends.grpc import converters, status
from edge_agent.frontends.grpc.admission import ResponseBudget
from edge_agent.frontends.grpc.decoupled import DecoupledCall
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.frontends.grpc.received import HeldBudgets, ReceiveBudget
from edge_agent.frontends.grpc.streams import END, StreamSession, StreamSessions, peer_key
from edge_agent.tracing.spans import RootTrace

log = logging.getLogger(__name__)

_Ctx: TypeAlias = grpc.ServicerContext
DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
UNARY_BUDGET_FROM = 1 << 20
"""Unary responses from this size (or 1/64 of a smaller budget) on are counted in the
response budget. Smaller ones are not: unary admission (4 calls per handler thread) already
bounds them to a few MiB in all, and counting them cost two locks and a completion callback
per call. Streams count every response (a stream may queue many)."""


def _response_bytes(result: InferResult, order: list[str] | None) -> int:
    """The bytes of output data a response to ``result`` carries."""
    names = order or result.outputs
    return sum(result.outputs[n].nbytes for n in names if n in result.outputs)


_errors = status.rpc_errors(log, "inference service")
"""Every unary handler's one error path: the agent's errors to their status codes."""


def _log_control(call: str, name: str, context: _Ctx, result: str | BaseException) -> None:
    repository.log_control(call, name, context.peer(), result)


def _over_uds(peer: str) -> bool:
    """Whether a call from ``peer`` (grpc's peer string or its :func:`peer_key`) came over the
    Unix socket."""
    return peer.split(":", 1)[0] == "unix"


def _has_parameters(tensors: Sequence[Any]) -> bool:
    """Whether any of a request's ``tensors`` (its inputs or its requested outputs) carries
    parameters (False for more than MAX_TENSORS of them: the converter refuses those unread)."""
    return len(tensors) <= MAX_TENSORS and any(len(t.parameters) for t in tensors)


def _traceparent(context: _Ctx) -> str | None:
    """The caller's W3C ``traceparent`` metadata (None: it sent none)."""
    for key, value in context.invocation_metadata():
        if key == "traceparent":
            return value if isinstance(value, str) else None
    return None


def _no_cuda_shm(context: _Ctx) -> NoReturn:
    context.abort(grpc.StatusCode.UNIMPLEMENTED,
                  "CUDA shared memory is not served by this agent; use system shared memory "
                  "(SystemSharedMemoryRegister) or send tensors in the request")
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


class _Taken(NamedTuple):
    """A ModelInfer call between its two halves (:meth:`InferenceServicer._take`)."""

    request: pb.ModelInferRequest
    context: _Ctx
    trace: RootTrace | None
    infer_request: InferRequest
    out_params: bool  # some requested output has parameters (shared memory, classes)
    placed: dict[str, Placement] | None  # the outputs going to shared memory
    place: int  # its place among calls taken up together


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """Serves the inference protocol from one front-end context (thread-safe, stateless itself).

    The context's ``control`` handles RepositoryModelLoad/Unload; None (the agent's unless
    ``[grpc] repository_control = true``) answers them UNAVAILABLE, naming the setting. Its
    shared memory regions are the HTTP front end's too.
    """

    def __init__(self, context: FrontendContext, *, streams: StreamSessions | None = None,
                 budget: ResponseBudget | None = None, uds: Path | None = None,
                 tcp_shared_memory: bool = False, received: ReceiveBudget | None = None
                 ) -> None:
        self._context = context
        self._dp = context.dataplane
        self._control = context.control
        self._streams = streams or StreamSessions()
        self._budget = budget or ResponseBudget(DEFAULT_MAX_RESPONSE_BYTES)
        self._budget_from = min(UNARY_BUDGET_FROM, self._budget.max_bytes // 64)
        self._shm = context.shared_memory
        self._uds = uds  # the Unix socket: who may connect to it may call over it
        self._tcp_shm = tcp_shared_memory  # [grpc] tcp_shared_memory
        self._received = received  # [grpc] max_receive_bytes_in_flight (charged on decoding)

    # -- health and metadata -------------------------------------------------------------

    def ServerLive(self, request: pb.ServerLiveRequest, context: _Ctx) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._dp.live())

    def ServerReady(self, request: pb.ServerReadyRequest, context: _Ctx) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._dp.ready())

    def ServerMetadata(self, request: pb.ServerMetadataRequest,
                       context: _Ctx) -> pb.ServerMetadataResponse:
        return converters.to_server_metadata(self._context.server_metadata(
            shared_memory=self._tcp_shm or _over_uds(context.peer())))

    @_errors
    def ModelReady(self, request: pb.ModelReadyRequest, context: _Ctx) -> pb.ModelReadyResponse:
        name = model_name(request.name)
        version = parse_version(request.version, name)
        return pb.ModelReadyResponse(ready=self._dp.model_ready(name, version))

    @_errors
    def ModelMetadata(self, request: pb.ModelMetadataRequest,
                      context: _Ctx) -> pb.ModelMetadataResponse:
        name = model_name(request.name)
        version = parse_version(request.version, name)
        return converters.to_model_metadata(self._dp.model_metadata(name, version))

    @_errors
    def ModelConfig(self, request: pb.ModelConfigRequest, context: _Ctx) -> pb.ModelConfigResponse:
        name = model_name(request.name)
        version = parse_version(request.version, name)
        info = self._dp.model_config(name, version)
        return pb.ModelConfigResponse(config=converters.to_model_config(info))

    # -- inference -----------------------------------------------------------------------

    @_errors
    def ModelInfer(self, request: pb.ModelInferRequest, context: _Ctx) -> pb.ModelInferResponse:
        trace = self._trace(request, context)
        try:
            taken = self._take(request, context, trace)
            return self._respond(taken, self._dp.infer(taken.infer_request))
        except BaseException as exc:
            if trace is not None:
                trace.responded(error=exc)
            raise

    def model_infer_together(self, calls: Sequence[tuple[pb.ModelInferRequest, _Ctx]]
                             ) -> list[pb.ModelInferResponse | Exception]:
        """ModelInfer for calls taken up together (the inference lane's: those whose requests
        were ready at once), their requests run together
        (:meth:`~edge_agent.core.api.DataPlaneAPI.infer_together`). Each call is answered
        as ModelInfer answers it, in order: its response, or the exception ModelInfer would
        raise (its context aborted with the status), returned. The lane passes only plain
        parsed requests, for which the handler wrapper (``handlers._guarded_unary``) does
        nothing on its thread: a check added there for such requests belongs here too."""
        answers: list[pb.ModelInferResponse | Exception | None] = [None] * len(calls)
        taken: list[_Taken] = []
        for i, (request, context) in enumerate(calls):
            trace = None
            try:
                trace = self._trace(request, context)
                taken.append(self._take(request, context, trace, i))
            except Exception as exc:
                answers[i] = self._failed(context, trace, exc)
        results = self._dp.infer_together([t.infer_request for t in taken]) if taken else []
        for t, result in zip(taken, results, strict=True):
            if isinstance(result, AgentError):
                answers[t.place] = self._failed(t.context, t.trace, result)
                continue
            try:
                answers[t.place] = self._respond(t, result)
            except Exception as exc:
                answers[t.place] = self._failed(t.context, t.trace, exc)
        return answers  # type: ignore[return-value]  # every call answered above

    @staticmethod
    def _failed(context: _Ctx, trace: RootTrace | None, exc: Exception) -> Exception:
        """The call aborted with ``exc``'s status; the exception it raised, detached."""
        if trace is not None:
            trace.responded(error=exc)
        return detached(status.without_raising(log, "inference service", context, exc))

    def _trace(self, request: pb.ModelInferRequest, context: _Ctx) -> RootTrace | None:
        tracing = self._context.tracing
        return tracing.start(request.model_name, traceparent=_traceparent(context),
                             request_id=request.id, protocol="grpc") \
            if tracing.active else None

    def _take(self, request: pb.ModelInferRequest, context: _Ctx, trace: RootTrace | None,
              place: int = 0) -> _Taken:
        """ModelInfer's first half: the request as the core takes it."""
        # one look at the tensors' parameters: outputs without any need no placement and no
        # classes; the peer (~3 us) only when some tensor has them (it may name a region)
        out_params = _has_parameters(request.outputs)
        shm = self._shm if self._tcp_shm or not (out_params or _has_parameters(request.inputs)) \
            else self._shm_for(context.peer())
        infer_request, _ = converters.to_infer_request(request, shm, self._dp)
        infer_request.caller = context  # cancelled or past its deadline: never run
        placed = converters.output_placements(request, shm) if out_params else None
        if trace is not None:
            infer_request.trace = trace
            trace.inputs(infer_request.inputs)
        return _Taken(request, context, trace, infer_request, out_params, placed, place)

    def _respond(self, taken: _Taken, result: InferResult) -> pb.ModelInferResponse:
        """ModelInfer's second half: the response to ``taken``'s ``result``."""
        if taken.out_params:  # the classification extension
            result = converters.classified(result, taken.request, self._dp)
        if taken.trace is not None:
            taken.trace.responded(version=result.version, outputs=result.outputs)
        infer_request = taken.infer_request
        nbytes = _response_bytes(result, infer_request.outputs)
        if nbytes >= self._budget_from:  # smaller ones are bounded by unary admission
            self._budget.acquire(nbytes)
            if not taken.context.add_callback(lambda: self._budget.release(nbytes)):
                self._budget.release(nbytes)  # the call already ended
        # raw_output_contents whatever form the inputs came in, as Triton answers
        return converters.to_infer_response(result, order=infer_request.outputs,
                                            placed=taken.placed)

    @_errors
    def TraceSetting(self, request: pb.TraceSettingRequest,
                     context: _Ctx) -> pb.TraceSettingResponse:
        """Triton's trace extension: no settings reads them, settings change them (an empty
        value clears one; only with ``[grpc] log_control``); the model's settings with
        ``model_name``, else the global ones."""
        model = model_name(request.model_name) if request.model_name else ""
        settings = trace_settings_call(
            self._context.tracing, model,
            {k: list(v.value) or None for k, v in request.settings.items()},
            allowed=self._context.log_control, peer=context.peer())
        value = pb.TraceSettingResponse.SettingValue
        return pb.TraceSettingResponse(settings={k: value(value=v) for k, v in settings.items()})

    def ModelStreamInfer(self, request_iterator: Iterator[pb.ModelInferRequest], context: _Ctx,
                         send_response_callback: Callable[[Any], None] | None = None
                         ) -> Iterator[pb.ModelStreamInferResponse] | None:
        """Pipelined: a reader thread submits each request as it arrives (never running it
        itself, so it keeps reading); a sender thread answers each as it finishes, so answers
        may come out of order (the caller matches them by id, as Triton's do). A failed
        request yields an error_message and the stream goes on. Non-blocking (no handler
        thread held): see :mod:`edge_agent.frontends.grpc.streams`."""
        if send_response_callback is not None:
            self._open_stream(request_iterator, context, send_response_callback)
            return None
        # a server without the non-blocking extension: answer through a blocking iterator
        answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._open_stream(request_iterator, context, answers.put)
        return iter(answers.get, None)

    def _open_stream(self, requests: Iterator[pb.ModelInferRequest], context: _Ctx,
                     send: Callable[[Any], None]) -> None:
        try:
            session = self._streams.open(peer_key(context.peer()), context, send)
        except AgentError as exc:
            context.set_code(status.grpc_code(exc))
            context.set_details(status.error_message(exc))
            send(None)
            return
        if not context.add_callback(lambda: self._streams.close(session)):
            self._streams.close(session)
            return
        threading.Thread(target=self._read_stream, args=(session, requests),
                         name="stream-infer-reader", daemon=True).start()

    def _read_stream(self, session: StreamSession,
                     requests: Iterator[pb.ModelInferRequest]) -> None:
        push, send = session.push, self._send_stream
        shm = self._shm_for(session.peer)
        caller = PolledCaller(session.context.is_active)  # the stream cancelled: not run
        # what the deserializer charged, claimed by this thread as it reads (handlers.py)
        typed = HeldBudgets(self._context.typed_budget, self._received)
        try:
            for msg in requests:
                session.received_one()
                try:
                    req, _ = converters.to_infer_request(msg, shm, self._dp)
                    req.caller = caller
                    future = self._dp.submit(req, inline=False)
                except DecoupledModelError:  # many responses: protocol/decoupled.py
                    typed.release_held()
                    push(DecoupledCall(self._dp, msg, req, True), send)
                    continue
                except Exception as exc:
                    typed.release_held()
                    push((msg, None, None, exc), send)
                    continue
                typed.hand_to(future)  # the request stays charged until it is answered
                future.add_done_callback(functools.partial(self._answered, session, msg, req))
        except Exception:  # the stream was cancelled, broke, or was ended: stop reading
            log.debug("stream reader stopped", exc_info=True)
        finally:
            typed.release_held()
            push(END, send)

    def _answered(self, session: StreamSession, msg: pb.ModelInferRequest, req: InferRequest,
                  done: Future[InferResult]) -> None:
        session.push((msg, req, done, None), self._send_stream)

    def _send_stream(self, session: StreamSession) -> None:
        answered, reading = 0, True
        shm = self._shm_for(session.peer)
        while reading or answered < session.received:  # after END, received is final
            item = session.items.get()
            if item is END:
                reading = False
                continue
            if isinstance(item, DecoupledCall):  # answered here, its responses in order
                try:
                    item.answer(session.send)
                finally:
                    session.answered_one()
                    answered += 1
                continue
            msg, req, done, exc = item
            response, nbytes = self._stream_response(msg, req, done, exc, shm)
            try:
                session.send(response)
            finally:
                self._budget.release(nbytes)
                session.answered_one()
                answered += 1
        session.finish()

    def _stream_response(self, msg: pb.ModelInferRequest, req: InferRequest | None,
                         future: Future[InferResult] | None, exc: BaseException | None,
                         shm: SharedMemoryRegistry | None
                         ) -> tuple[pb.ModelStreamInferResponse, int]:
        if exc is None and future is not None:
            try:
                result = converters.classified(future.result(), msg, self._dp)
                nbytes = _response_bytes(result, req.outputs if req else None)
                self._budget.acquire(nbytes)
                try:
                    placed = converters.output_placements(msg, shm)  # shared memory
                    response = converters.to_infer_response(
                        result, order=req.outputs if req else None, placed=placed)
                except BaseException:
                    self._budget.release(nbytes)
                    raise
                return pb.ModelStreamInferResponse(infer_response=response), nbytes
            except Exception as err:
                exc = err
        assert exc is not None
        if not isinstance(exc, AgentError):
            log.exception("stream inference failed", exc_info=exc)
        return pb.ModelStreamInferResponse(
            error_message=status.error_message(exc),
            infer_response=pb.ModelInferResponse(model_name=msg.model_name,
                                                 model_version=msg.model_version,
                                                 id=msg.id)), 0

    # -- statistics and repository -------------------------------------------------------

    @_errors
    def ModelStatistics(self, request: pb.ModelStatisticsRequest,
                        context: _Ctx) -> pb.ModelStatisticsResponse:
        name = request.name or None
        version = parse_version(request.version, request.name) if name else None
        stats = self._dp.statistics(name, version)
        return pb.ModelStatisticsResponse(
            model_stats=[converters.to_model_statistics(s) for s in stats])

    @_errors
    def RepositoryIndex(self, request: pb.RepositoryIndexRequest,
                        context: _Ctx) -> pb.RepositoryIndexResponse:
        return converters.to_repository_index(self._dp.repository_index(request.ready))

    @_errors
    def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest,
                            context: _Ctx) -> pb.RepositoryModelLoadResponse:
        """Load the model's ACTIVE version again (the manager decides which; off by default),
        with a ``config`` parameter's live settings applied first."""
        try:
            control = self._control_or_refuse("RepositoryModelLoad")
            name = model_name(request.model_name)
            settings = repository.load_settings(name, {
                key: getattr(value, value.WhichOneof("parameter_choice") or "string_param")
                for key, value in request.parameters.items()})
            summary = control.load_model(name, settings)
        except Exception as exc:
            _log_control("RepositoryModelLoad", request.model_name, context, exc)
            raise
        _log_control("RepositoryModelLoad", request.model_name, context, summary)
        return pb.RepositoryModelLoadResponse()

    @_errors
    def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest,
                              context: _Ctx) -> pb.RepositoryModelUnloadResponse:
        """Unload every version of the model, through the manager (off by default)."""
        try:
            control = self._control_or_refuse("RepositoryModelUnload")
            repository.refuse_parameters("RepositoryModelUnload", request.parameters,
                                       allowed=repository.UNLOAD_PARAMETERS)
            summary = control.unload_model(model_name(request.model_name))
        except Exception as exc:
            _log_control("RepositoryModelUnload", request.model_name, context, exc)
            raise
        _log_control("RepositoryModelUnload", request.model_name, context, summary)
        return pb.RepositoryModelUnloadResponse()

    # -- shared memory (the KServe/Triton extension; frontends/common/shared_memory.py) ------

    def _shm_for(self, peer: str) -> SharedMemoryRegistry | None:
        """The regions, for a caller at ``peer`` that may use them (None: over TCP, off)."""
        return self._shm if self._tcp_shm or _over_uds(peer) else None

    def _callers(self, context: _Ctx) -> Callers:
        """Who may be calling (the Unix socket's possible users), or the refusal over TCP."""
        if _over_uds(context.peer()) and self._uds is not None:
            return Callers.of_socket(self._uds)
        if not self._tcp_shm:
            raise refused_over_tcp(TCP_SETTING)
        return Callers.agent(f"TCP ({TCP_SETTING})")

    @_errors
    def SystemSharedMemoryStatus(self, request: pb.SystemSharedMemoryStatusRequest,
                                 context: _Ctx) -> pb.SystemSharedMemoryStatusResponse:
        self._callers(context)  # refused over TCP unless configured
        response = pb.SystemSharedMemoryStatusResponse()
        for region in self._shm.status(request.name):
            response.regions[region.name].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(
                    name=region.name, key=region.key, offset=region.offset,
                    byte_size=region.byte_size))
        return response

    @_errors
    def SystemSharedMemoryRegister(self, request: pb.SystemSharedMemoryRegisterRequest,
                                   context: _Ctx) -> pb.SystemSharedMemoryRegisterResponse:
        self._shm.register(request.name, request.key, request.offset, request.byte_size,
                           self._callers(context))
        return pb.SystemSharedMemoryRegisterResponse()

    @_errors
    def SystemSharedMemoryUnregister(self, request: pb.SystemSharedMemoryUnregisterRequest,
                                     context: _Ctx) -> pb.SystemSharedMemoryUnregisterResponse:
        self._callers(context)  # refused over TCP unless configured
        self._shm.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    def CudaSharedMemoryStatus(self, request: pb.CudaSharedMemoryStatusRequest,
                               context: _Ctx) -> pb.CudaSharedMemoryStatusResponse:
        return pb.CudaSharedMemoryStatusResponse()  # CPU-only: never a region, as Triton

    def CudaSharedMemoryRegister(self, request: pb.CudaSharedMemoryRegisterRequest,
                                 context: _Ctx) -> pb.CudaSharedMemoryRegisterResponse:
        _no_cuda_shm(context)

    def CudaSharedMemoryUnregister(self, request: pb.CudaSharedMemoryUnregisterRequest,
                                   context: _Ctx) -> pb.CudaSharedMemoryUnregisterResponse:
        return pb.CudaSharedMemoryUnregisterResponse()  # nothing registered: nothing to drop

    @_errors
    def LogSettings(self, request: pb.LogSettingsRequest,
                    context: _Ctx) -> pb.LogSettingsResponse:
        """The logging extension: every setting, after applying the request's (if any)."""
        changes = {key: getattr(value, value.WhichOneof("parameter_choice") or "string_param")
                   for key, value in request.settings.items()}
        current = log_settings_call(self._context.log_settings, changes,
                                    allowed=self._context.log_control, peer=context.peer())
        response = pb.LogSettingsResponse()
        for key, value in current.items():
            field = ("bool_param" if isinstance(value, bool) else
                     "uint32_param" if isinstance(value, int) else "string_param")
            setattr(response.settings[key], field, value)
        return response

    def _control_or_refuse(self, call: str) -> RepositoryControl:
        return repository.control_or_refuse(self._control, call)
