"""Plain values that cross the boundary between the protocol edge and the serving core."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from packager.bundle.manifest import TensorSpec

if TYPE_CHECKING:
    from edge_agent.core.observer import RequestTrace

TRITON_PLATFORMS = {"onnxruntime": "onnxruntime_onnx", "openvino": "openvino",
                    "tensorrt": "tensorrt_plan", "pipeline": "ensemble"}
"""Backend name -> the platform string Triton reports for the same kind of model."""


def triton_platform(backend: str) -> str:
    """What ModelMetadata/ModelConfig report as ``platform`` for ``backend``."""
    return TRITON_PLATFORMS.get(backend, backend)


class Caller(Protocol):
    """Who waits for a request's answer, as its front end sees it (a gRPC ``ServicerContext``
    is one as it is; HTTP: the connection). The core drops a queued request whose caller is
    gone and never runs it."""

    def is_active(self) -> bool:
        """False once the caller cancelled, its deadline passed or its connection closed."""
        ...

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` once when the call ends (for whatever reason); False when it has
        ended already. A caller that can only be polled returns True and never calls it."""
        ...


class PolledCaller:
    """A caller the core polls (``is_active``, asked when an instance comes to its request)
    and that never calls back (HTTP connections, stream requests: a callback per stream
    request would pile up on the stream's context for as long as the stream lives). A caller
    that calls back (a gRPC unary call's context) is not polled: its callback withdraws the
    request at once."""

    __slots__ = ("is_active",)

    def __init__(self, is_active: Callable[[], bool]) -> None:
        self.is_active = is_active

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """Nothing to register: the core polls :attr:`is_active`."""
        return True


@dataclass(frozen=True, slots=True)
class SequenceFlags:
    """A stateful model's request: its sequence's id (a uint64 or a string) and flags."""

    id: int | str
    start: bool = False
    end: bool = False


@dataclass(slots=True)
class InferRequest:
    """One inference call as the core sees it: numpy arrays keyed by input name.

    ``version`` None means the model's default (active) version. ``outputs`` None means all.
    ``timeout_us`` None means the model's default queue timeout. ``priority`` 0 means the
    model's priority (1 is the highest: it is batched and runs first when executions wait).
    ``caller`` (None: nobody leaves) lets the core drop the request if its caller gives up
    before it runs. ``trace`` (None: untraced) receives the request's timestamps.
    ``sequence``: a stateful model's request (:mod:`edge_agent.core.sequences`).
    """

    model: str
    inputs: dict[str, np.ndarray]
    version: int | None = None
    outputs: list[str] | None = None
    id: str = ""
    timeout_us: int | None = None
    priority: int = 0
    caller: Caller | None = None
    trace: RequestTrace | None = None
    sequence: SequenceFlags | None = None


@dataclass(slots=True)
class InferResult:
    """The answer to one InferRequest, produced wholly by one model version."""

    model: str
    version: int
    outputs: dict[str, np.ndarray]
    id: str = ""


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """What a caller may learn about a served model version."""

    name: str
    versions: tuple[int, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int = 0


@dataclass(slots=True)
class DurationStat:
    """Count and total nanoseconds, as in Triton's StatisticDuration."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, n: int = 1) -> None:
        self.count += n
        self.ns += ns


@dataclass(slots=True)
class BatchStat:
    """Per batch size execution statistics (Triton's InferBatchStatistics)."""

    batch_size: int
    compute_input: DurationStat = field(default_factory=DurationStat)
    compute_infer: DurationStat = field(default_factory=DurationStat)
    compute_output: DurationStat = field(default_factory=DurationStat)


@dataclass(slots=True)
class ModelStats:
    """Cumulative statistics of one model version (Triton's ModelStatistics fields)."""

    name: str
    version: int
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: DurationStat = field(default_factory=DurationStat)
    fail: DurationStat = field(default_factory=DurationStat)
    queue: DurationStat = field(default_factory=DurationStat)
    compute_input: DurationStat = field(default_factory=DurationStat)
    compute_infer: DurationStat = field(default_factory=DurationStat)
    compute_output: DurationStat = field(default_factory=DurationStat)
    batch_stats: dict[int, BatchStat] = field(default_factory=dict)
    cache_hit: DurationStat = field(default_factory=DurationStat)
    cache_miss: DurationStat = field(default_factory=DurationStat)
    # failures by reason, as Triton's nv_inference_request_failure{reason=...} splits them
    # (both are also in ``fail``; the rest of ``fail`` failed in the backend): requests whose
    # caller left before they ran (never executed), and requests refused or timed out before
    # they ran (invalid input, full queue, queue timeout)
    cancel: DurationStat = field(default_factory=DurationStat)
    rejected: DurationStat = field(default_factory=DurationStat)
    pending_count: int = 0
    """Requests queued and not yet executing (Triton's pending request count)."""
    recent_request_ns: tuple[int, ...] = ()
    """Durations of the last requests (core/tallies.py's window), for quantiles."""
    recent_queue_ns: tuple[int, ...] = ()
    recent_compute_infer_ns: tuple[int, ...] = ()
    memory_bytes: int = 0
    """The orchestrator's memory figure for the version (0: none)."""
    memory_source: str = ""
    """Where that figure comes from: "device" (measured here), "build" or "artifact"."""
