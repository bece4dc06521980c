"""Requests' timestamps turned into OpenTelemetry spans, exported over OTLP/HTTP.

Only this module imports OpenTelemetry (the ``[otel]`` extra), and only once tracing is on.
A traced request is one root span (request received to response sent) in the caller's trace
when it sent a W3C ``traceparent``; under it a ``queue`` and a ``compute`` span from the
batcher's timestamps, the batch formed and compute start/end as events, and a child span per
call its model makes (a pipeline's steps, a Python model's ``ctx.infer``), each with its own
queue and compute spans.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from edge_agent.errors import TraceSettingError

_TENSOR_VALUES = 16  # values of each tensor a TENSORS trace records


def otel_missing() -> str:
    """Why spans cannot be exported here ("" when they can): the [otel] extra is missing."""
    from packager.extras import refusal

    return refusal("otel", "tracing (a trace_level other than OFF)") or ""


class Exporter:
    """One tracer provider exporting to one OTLP/HTTP collector (made on first use)."""

    def __init__(self, endpoint: str) -> None:
        missing = otel_missing()
        if missing:
            raise TraceSettingError(missing)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.endpoint = endpoint
        self._provider = TracerProvider(resource=Resource.create({"service.name": "edge-agent"}))
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self.tracer = self._provider.get_tracer("edge_agent.tracing")
        self._propagator = TraceContextTextMapPropagator()

    def root(self, name: str, traceparent: str | None, levels: tuple[str, ...],
             attributes: Mapping[str, Any]) -> RootTrace:
        """A request's root span, started now, in the caller's trace if it sent one."""
        from opentelemetry.trace import SpanKind

        parent = self._propagator.extract({"traceparent": traceparent}) if traceparent else None
        offset = time.time_ns() - time.monotonic_ns()
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.SERVER,
                                      attributes=dict(attributes))
        span.add_event("request received")
        return RootTrace(self, span, offset, levels)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export every finished span now."""
        return bool(self._provider.force_flush(int(timeout_s * 1000)))

    def close(self) -> None:
        """Export what is left and stop the exporter."""
        self._provider.shutdown()


class _SpanTrace:
    """A :class:`edge_agent.core.observer.RequestTrace` over one span."""

    __slots__ = ("_exporter", "_levels", "_offset", "span")

    def __init__(self, exporter: Exporter, span: Any, offset: int,
                 levels: tuple[str, ...]) -> None:
        self._exporter = exporter
        self.span = span
        self._offset = offset
        self._levels = levels

    def executed(self, *, enqueued_ns: int, start_ns: int, compute_start_ns: int,
                 compute_end_ns: int, end_ns: int, batch_size: int, ok: bool) -> None:
        from opentelemetry.trace import Status, StatusCode, set_span_in_context

        off, tracer = self._offset, self._exporter.tracer
        here = set_span_in_context(self.span)
        tracer.start_span("queue", context=here, start_time=enqueued_ns + off).end(
            end_time=start_ns + off)
        self.span.add_event("batch formed", {"batch_size": batch_size},
                            timestamp=start_ns + off)
        compute = tracer.start_span("compute", context=here, start_time=compute_start_ns + off,
                                    attributes={"batch_size": batch_size})
        compute.add_event("compute start", timestamp=compute_start_ns + off)
        compute.add_event("compute end", timestamp=compute_end_ns + off)
        if not ok:
            compute.set_status(Status(StatusCode.ERROR))
        compute.end(end_time=compute_end_ns + off)

    def nested(self, model: str) -> _SpanTrace:
        from opentelemetry.trace import SpanKind, set_span_in_context

        span = self._exporter.tracer.start_span(
            f"call {model}", context=set_span_in_context(self.span), kind=SpanKind.INTERNAL,
            attributes={"model.name": model})
        return _SpanTrace(self._exporter, span, self._offset, self._levels)

    def finished(self, *, ok: bool) -> None:
        if not ok:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()


class RootTrace(_SpanTrace):
    """A traced request's root span; the front end ends it with :meth:`responded`."""

    __slots__ = ()

    def inputs(self, tensors: Mapping[str, np.ndarray]) -> None:
        """At TENSORS level: the request's tensors on the root span."""
        if "TENSORS" in self._levels:
            _record(self.span, "input", tensors)

    def responded(self, *, version: int | None = None,
                  outputs: Mapping[str, np.ndarray] | None = None,
                  error: BaseException | None = None) -> None:
        """The response was sent (``outputs``) or the request failed (``error``)."""
        if version is not None:
            self.span.set_attribute("model.version", version)
        if outputs is not None and "TENSORS" in self._levels:
            _record(self.span, "output", outputs)
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR, str(error)))
        self.span.add_event("response sent")
        self.span.end()


def _record(span: Any, kind: str, tensors: Mapping[str, np.ndarray]) -> None:
    for name, array in tensors.items():
        flat = np.asarray(array).reshape(-1)[:_TENSOR_VALUES]
        span.set_attribute(f"{kind}.{name}.datatype", str(np.asarray(array).dtype))
        span.set_attribute(f"{kind}.{name}.shape", list(np.shape(array)))
        span.set_attribute(f"{kind}.{name}.data", [str(v) for v in flat.tolist()])
