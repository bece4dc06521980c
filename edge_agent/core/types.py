"""Plain values that cross the boundary between the protocol edge and the serving core."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from packager.bundle.manifest import TensorSpec

TRITON_PLATFORMS = {"onnxruntime": "onnxruntime_onnx", "openvino": "openvino",
                    "tensorrt": "tensorrt_plan", "pipeline": "ensemble"}
"""Backend name -> the platform string Triton reports for the same kind of model."""


def triton_platform(backend: str) -> str:
    """What ModelMetadata/ModelConfig report as ``platform`` for ``backend``."""
    return TRITON_PLATFORMS.get(backend, backend)


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
    ``sequence``: a stateful model's request (:mod:`edge_agent.core.sequences`).
    """

    model: str
    inputs: dict[str, np.ndarray]
    version: int | None = None
    outputs: list[str] | None = None
    id: str = ""
    timeout_us: int | None = None
    priority: int = 0
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
