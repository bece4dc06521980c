"""The KServe v2 REST endpoints over a :class:`~edge_agent.core.api.DataPlaneAPI`.

Wire-free: :meth:`KServeRoutes.handle` takes a method, a path and a body and returns an
:class:`HttpAnswer`; the server (:mod:`edge_agent.frontends.http.server`) owns sockets and
headers. Errors become ``{"error": "..."}`` with the status the one error mapping
(:mod:`edge_agent.frontends.common.errors`) gives the agent's error code.
Metadata and statistics are Triton's JSON; the model configuration is the protobuf JSON of the
gRPC ModelConfig (as Triton prints it), built by the same converter.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from google.protobuf import json_format

from edge_agent.core.types import Caller, DurationStat, ModelStats
from edge_agent.errors import AgentError, InvalidInputError, TraceSettingError
from edge_agent.frontends.common import control as repository
from edge_agent.frontends.common.classification import classify
from edge_agent.frontends.common.context import FrontendContext
from edge_agent.frontends.common.errors import error_message, http_status
from edge_agent.frontends.common.logging_extension import log_settings_call, trace_settings_call
from edge_agent.frontends.common.names import model_name, parse_version
from edge_agent.frontends.common.shared_memory import (
    HTTP_SETTING,
    Callers,
    SharedMemoryRegistry,
    refused_over_tcp,
)
from edge_agent.frontends.grpc import converters  # Triton's config JSON is the protobuf's
from edge_agent.frontends.http import jsonscan, tensors
from edge_agent.tracing.spans import RootTrace
from packager.bundle.manifest import TensorSpec

log = logging.getLogger(__name__)

JSON = "application/json"
BINARY = "application/octet-stream"
LARGE_JSON = 64 * 1024
"""Request JSON of at least this many bytes is decoded one request at a time (below)."""


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """Status, body, content type and extra headers of one answer."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()


def _json(status: int, doc: Any) -> HttpAnswer:
    return HttpAnswer(status, json.dumps(doc, separators=(",", ":")).encode())


def error_answer(exc: BaseException) -> HttpAnswer:
    """``{"error": message}`` with the status ``exc`` maps to (500 for a bug)."""
    return _json(http_status(exc), {"error": error_message(exc)})


def not_found(method: str, path: str) -> HttpAnswer:
    """404 for a path this server does not serve."""
    return _json(404, {"error": f"{method} {path[:200]} is not a KServe v2 endpoint served "
                                "here (see docs/http.md)"})


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """What a route sees of a request."""

    method: str
    path: str
    body: bytes
    header_length: int | None
    peer: str
    caller: Caller | None = None
    """The connection (:func:`~edge_agent.frontends.common.callers.connection_caller`): an
    inference whose caller hung up before it ran is dropped."""
    traceparent: str | None = None  # the caller's W3C trace context (read while tracing)


_Handler = Callable[[HttpRequest, dict[str, str]], HttpAnswer]
_V = r"(?:/versions/(?P<version>[^/]+))?"
_M = r"/v2/models/(?P<model>[^/]+)" + _V
_TRACE = re.compile(r"/v2(?:/models/(?P<model>[^/]+))?/trace/setting")


def _duration(stat: DurationStat) -> dict[str, int]:
    return {"count": stat.count, "ns": stat.ns}


def statistics_json(stats: ModelStats) -> dict[str, Any]:
    """One model version's statistics as Triton's REST API reports them (numbers, not
    strings)."""
    return {
        "name": stats.name, "version": str(stats.version),
        "last_inference": stats.last_inference_ms, "inference_count": stats.inference_count,
        "execution_count": stats.execution_count,
        "inference_stats": {k: _duration(getattr(stats, k)) for k in (
            "success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
            "cache_hit", "cache_miss")},
        "batch_stats": [{"batch_size": b.batch_size,
                         "compute_input": _duration(b.compute_input),
                         "compute_infer": _duration(b.compute_infer),
                         "compute_output": _duration(b.compute_output)}
                        for _, b in sorted(stats.batch_stats.items())],
    }


def _tensor_json(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"shared memory register: '{what}' must be an integer >= 0")
    return value


def _body_object(body: bytes, what: str) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidInputError(f"{what}: the request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidInputError(f"{what}: the request body must be a JSON object")
    return doc


class KServeRoutes:
    """Every KServe v2 REST endpoint this agent serves. Thread-safe (stateless itself).

    ``context`` is the one the gRPC front end is given too: its repository control handles
    load/unload (None: refused, naming the setting), its shared memory regions are shared.
    """

    def __init__(self, context: FrontendContext, *, shared_memory: bool = False) -> None:
        self._context = context
        self.tracing = context.tracing
        self._dp = context.dataplane
        self._control = context.control
        shm = context.shared_memory
        self._shm_on = shared_memory  # [http] shared_memory: HTTP is TCP, any local user
        self._shm = shm if shm.available and shared_memory else None
        # large JSON is parsed and converted in pieces (jsonscan.loads, to_array: a few ms of
        # GIL each) and one request at a time, so that the gRPC handlers get the GIL between
        self._decoding = threading.Lock()
        self._routes: list[tuple[str, re.Pattern[str], _Handler]] = [
            ("POST", re.compile(_M + "/infer"), self._infer),
            ("GET", re.compile(r"/v2/health/live"), self._live),
            ("GET", re.compile(r"/v2/health/ready"), self._ready),
            ("GET", re.compile(r"/v2"), self._server_metadata),
            ("GET", re.compile(_M + "/ready"), self._model_ready),
            ("GET", re.compile(_M + "/config"), self._model_config),
            ("GET", re.compile(_M + "/stats"), self._statistics),
            ("GET", _TRACE, self._trace_setting),
            ("POST", _TRACE, self._trace_setting),
            ("GET", re.compile(r"/v2/models/stats"), self._statistics),
            ("GET", re.compile(_M), self._model_metadata),
            ("POST", re.compile(r"/v2/repository/index"), self._index),
            ("POST", re.compile(r"/v2/repository/models/(?P<model>[^/]+)/load"), self._load),
            ("POST", re.compile(r"/v2/repository/models/(?P<model>[^/]+)/unload"),
             self._unload),
            ("GET", re.compile(r"/v2/systemsharedmemory(?:/region/(?P<region>[^/]+))?/status"),
             self._shm_status),
            ("POST", re.compile(r"/v2/systemsharedmemory/region/(?P<region>[^/]+)/register"),
             self._shm_register),
            ("POST", re.compile(
                r"/v2/systemsharedmemory(?:/region/(?P<region>[^/]+))?/unregister"),
             self._shm_unregister),
            ("GET", re.compile(r"/v2/cudasharedmemory(?:/region/[^/]+)?/status"),
             self._no_cuda_regions),
            ("POST", re.compile(r"/v2/cudasharedmemory(?:/region/[^/]+)?/unregister"),
             self._no_cuda_regions),
            ("*", re.compile(r"/v2/cudasharedmemory.*"), self._no_cuda),
            ("GET", re.compile(r"/v2/logging"), self._logging),
            ("POST", re.compile(r"/v2/logging"), self._logging),
        ]

    def handle(self, request: HttpRequest) -> HttpAnswer:
        """The answer to ``request``; never raises."""
        try:
            for method, pattern, handler in self._routes:
                match = pattern.fullmatch(request.path)
                if match is not None and method in ("*", request.method):
                    params = {k: unquote(v) for k, v in match.groupdict().items()
                              if v is not None}
                    return handler(request, params)
            known = any(p.fullmatch(request.path) for _, p, _ in self._routes)
            if known:
                return _json(405, {"error": f"{request.method} is not allowed on "
                                            f"{request.path[:200]}"})
            return not_found(request.method, request.path)
        except Exception as exc:
            if not isinstance(exc, AgentError):
                log.exception("unexpected error in the HTTP front end", exc_info=exc)
            return error_answer(exc)

    # -- health and metadata -------------------------------------------------------------

    def _live(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        return HttpAnswer(200 if self._dp.live() else 503, b"")

    def _ready(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        return HttpAnswer(200 if self._dp.ready() else 503, b"")

    def _server_metadata(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        meta = self._context.server_metadata(binary_tensor_data=True,
                                             shared_memory=self._shm_on)
        return _json(200, {"name": meta.name, "version": meta.version,
                           "extensions": list(meta.extensions)})

    @staticmethod
    def _model(params: dict[str, str]) -> tuple[str, int | None]:
        name = model_name(params["model"])
        return name, parse_version(params.get("version", ""), name)

    def _model_ready(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        return HttpAnswer(200 if self._dp.model_ready(*self._model(params)) else 400, b"")

    def _model_metadata(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        meta = self._dp.model_metadata(*self._model(params))
        return _json(200, {"name": meta.name, "versions": [str(v) for v in meta.versions],
                           "platform": meta.platform,
                           "inputs": [_tensor_json(s) for s in meta.inputs],
                           "outputs": [_tensor_json(s) for s in meta.outputs]})

    def _model_config(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        config = converters.to_model_config(self._dp.model_config(*self._model(params)))
        return _json(200, json_format.MessageToDict(config, preserving_proto_field_name=True))

    # -- inference -----------------------------------------------------------------------

    def _infer(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        name = model_name(params["model"])
        tracing = self.tracing
        trace = tracing.start(name, traceparent=request.traceparent, protocol="http") \
            if tracing.active else None
        if trace is None:
            return self._infer_answer(request, params, name, None)
        try:
            return self._infer_answer(request, params, name, trace)
        except BaseException as exc:
            trace.responded(error=exc)
            raise

    def _infer_answer(self, request: HttpRequest, params: dict[str, str], name: str,
                      trace: RootTrace | None) -> HttpAnswer:
        version = params.get("version", "")

        def output_count() -> int:
            return len(self._dp.model_metadata(name, parse_version(version, name)).outputs)

        json_bytes = len(request.body) if request.header_length is None \
            else request.header_length
        budget = self._context.typed_budget
        with budget.held():  # JSON data charged until answered
            if json_bytes < LARGE_JSON:
                call = tensors.decode_request(request.body, request.header_length, name,
                                              version, self._shm, output_count,
                                              dataplane=self._dp, budget=budget)
            else:
                with self._decoding:
                    call = tensors.decode_request(request.body, request.header_length, name,
                                                  version, self._shm, output_count,
                                                  jsonscan.loads, dataplane=self._dp,
                                                  budget=budget)
            call.request.caller = request.caller
            if trace is not None:
                call.request.trace = trace
                trace.inputs(call.request.inputs)
            result = self._dp.infer(call.request)  # idle: runs on this thread, no hop
            result = classify(result, call.classes, self._dp)
            body, header_length = tensors.encode_response(result, call)
        if trace is not None:
            trace.responded(version=result.version, outputs=result.outputs)
        if header_length is None:
            return HttpAnswer(200, body)
        return HttpAnswer(200, body, BINARY,
                          ((tensors.HEADER_LENGTH, str(header_length)),))

    def _trace_setting(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        """Triton's trace extension: GET reads, POST changes (a null value clears one; only
        with ``[grpc] log_control``)."""
        model = model_name(params["model"]) if "model" in params else ""
        if request.method == "GET":
            return _json(200, self.tracing.get(model))
        doc = _body_object(request.body, "trace setting")
        settings: dict[str, list[str] | None] = {}
        for key, value in doc.items():
            if value is not None and not isinstance(value, str | list):
                raise TraceSettingError(f"trace setting '{key}': expected a string, a list "
                                        f"of strings or null, got {value!r}")
            settings[key] = [value] if isinstance(value, str) else value
        return _json(200, trace_settings_call(self.tracing, model, settings,
                                              allowed=self._context.log_control,
                                              peer=request.peer))

    # -- statistics and repository -------------------------------------------------------

    def _statistics(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        name, version = self._model(params) if "model" in params else (None, None)
        stats = self._dp.statistics(name, version)
        return _json(200, {"model_stats": [statistics_json(s) for s in stats]})

    def _index(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        doc = _body_object(request.body, "repository index")
        ready = doc.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInputError("repository index: 'ready' must be true or false")
        return _json(200, [{"name": e.name, "version": str(e.version), "state": e.state,
                            "reason": e.reason} for e in self._dp.repository_index(ready)])

    def _load(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        return self._control_call("RepositoryModelLoad", request, params,
                                  repository.LOAD_PARAMETERS)

    def _unload(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        return self._control_call("RepositoryModelUnload", request, params,
                                  repository.UNLOAD_PARAMETERS)

    def _control_call(self, call: str, request: HttpRequest, params: dict[str, str],
                      allowed: tuple[str, ...]) -> HttpAnswer:
        name = params["model"]
        try:
            control = repository.control_or_refuse(self._control, call)
            doc = _body_object(request.body, call)
            extra = doc.get("parameters", {})
            if not isinstance(extra, dict):
                raise InvalidInputError(f"{call}: 'parameters' must be a JSON object")
            model = model_name(name)
            if call == "RepositoryModelLoad":
                summary = control.load_model(model, repository.load_settings(model, extra))
            else:
                repository.refuse_parameters(call, extra, allowed=allowed)
                summary = control.unload_model(model)
        except Exception as exc:
            repository.log_control(call, name, request.peer, exc)
            raise
        repository.log_control(call, name, request.peer, summary)
        return HttpAnswer(200, b"")

    def _logging(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        """The logging extension: GET reads every setting; POST changes those given."""
        changes = _body_object(request.body, "log settings") if request.method == "POST" \
            else {}
        return _json(200, log_settings_call(self._context.log_settings, changes,
                                            allowed=self._context.log_control,
                                            peer=request.peer))

    # -- system shared memory ------------------------------------------------------------

    def _registry(self) -> SharedMemoryRegistry:
        if not self._shm_on:
            raise refused_over_tcp(HTTP_SETTING)
        if self._shm is None:
            raise InvalidInputError("system shared memory is not available on this system")
        return self._shm

    def _shm_status(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        regions = self._registry().status(params.get("region", ""))
        return _json(200, [{"name": r.name, "key": r.key, "offset": r.offset,
                            "byte_size": r.byte_size} for r in regions])

    def _shm_register(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        doc = _body_object(request.body, "shared memory register")
        key = doc.get("key")
        if not isinstance(key, str):
            raise InvalidInputError("shared memory register: 'key' must be a string")
        offset, size = (_count(doc.get(k, 0 if k == "offset" else None), k)
                        for k in ("offset", "byte_size"))
        self._registry().register(params["region"], key, offset, size,
                                  Callers.agent(f"HTTP ({HTTP_SETTING})"))
        return HttpAnswer(200, b"")

    def _shm_unregister(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        self._registry().unregister(params.get("region", ""))
        return HttpAnswer(200, b"")

    def _no_cuda_regions(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        """CUDA shared memory status/unregister on a CPU-only agent: no region, as Triton."""
        return _json(200, []) if request.method == "GET" else HttpAnswer(200, b"")

    def _no_cuda(self, request: HttpRequest, params: dict[str, str]) -> HttpAnswer:
        return _json(400, {"error": "CUDA shared memory is not served by this agent; use "
                                    "system shared memory or send tensors in the request"})

