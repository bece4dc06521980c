"""The server side of a measurement, as perf_analyzer reports it: the model's cumulative
statistics (KServe v2 / Triton ModelStatistics, over gRPC or ``GET .../stats``) read before
and after the measured window, and their difference per request (queue, compute input, compute
infer, compute output; the rest of the request's time in the server is its overhead)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import grpc
from google.protobuf import json_format

from edge_agent.errors import InvalidInputError
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.perf.rest import get_json, http_target, model_path

_DURATIONS = ("success", "queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class ServerStats:
    """Cumulative counters of one model (every version the server reported, summed)."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> ServerStats:
        """From ``{"model_stats": [...]}`` as Triton's REST API (or the gRPC message as JSON
        with the proto's field names) reports it."""
        total = cls()
        for model in doc.get("model_stats") or []:
            infer = model.get("inference_stats") or {}

            def duration(key: str, part: str, infer: Mapping[str, Any] = infer) -> int:
                return int((infer.get(key) or {}).get(part, 0))

            one = cls(int(model.get("inference_count", 0)), int(model.get("execution_count", 0)),
                      duration("success", "count"),
                      *(duration(k, "ns") for k in _DURATIONS))
            total = total + one
        return total

    def _combine(self, other: ServerStats, sign: int) -> ServerStats:
        return ServerStats(*(getattr(self, f.name) + sign * getattr(other, f.name)
                             for f in fields(self)))

    def __add__(self, other: ServerStats) -> ServerStats:
        return self._combine(other, 1)

    def __sub__(self, other: ServerStats) -> ServerStats:
        return self._combine(other, -1)

    def per_request_us(self, what: str) -> float:
        """``what`` ("success", "queue", "compute_input", ...) in µs per successful request."""
        ns: int = getattr(self, f"{what}_ns")
        return ns / self.success_count / 1000 if self.success_count else 0.0

    @property
    def overhead_us(self) -> float:
        """The request's time in the server outside queue and compute (never below 0)."""
        parts = sum(self.per_request_us(k) for k in _DURATIONS[1:])
        return max(0.0, self.per_request_us("success") - parts)

    def report(self) -> list[str]:
        """perf_analyzer's ``Server:`` lines."""
        us = self.per_request_us
        return ["  Server: ", f"    Inference count: {self.inference_count}",
                f"    Execution count: {self.execution_count}",
                f"    Successful request count: {self.success_count}",
                f"    Avg request latency: {us('success'):.0f} usec (overhead "
                f"{self.overhead_us:.0f} usec + queue {us('queue'):.0f} usec + compute input "
                f"{us('compute_input'):.0f} usec + compute infer {us('compute_infer'):.0f} usec "
                f"+ compute output {us('compute_output'):.0f} usec)"]

    def as_json(self) -> dict[str, float | int]:
        """The window's figures for ``--json``: counts and µs per request."""
        out: dict[str, float | int] = {"inference_count": self.inference_count,
                                       "execution_count": self.execution_count,
                                       "success_count": self.success_count,
                                       "overhead_us": self.overhead_us}
        out |= {f"{k}_us" if k != "success" else "request_us": self.per_request_us(k)
                for k in _DURATIONS}
        return out


def stats_reader(url: str, model: str, version: str = "", protocol: str = "grpc",
                 timeout_s: float = 30.0) -> Callable[[], ServerStats]:
    """A function reading ``model``'s statistics now, over the protocol being measured."""
    if protocol == "http":
        target = http_target(url)
        path = model_path(model, version) + "/stats"
        return lambda: ServerStats.of(get_json(target, path, timeout_s))

    def read() -> ServerStats:
        with grpc.insecure_channel(url) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            try:
                answer = stub.ModelStatistics(pb.ModelStatisticsRequest(name=model,
                                                                        version=version),
                                              timeout=timeout_s)
            except grpc.RpcError as exc:
                raise InvalidInputError(f"{url}: statistics of model {model!r}: "
                                        f"{exc.code().name}: {exc.details()}") from None
        return ServerStats.of(json_format.MessageToDict(answer,
                                                        preserving_proto_field_name=True))

    return read
