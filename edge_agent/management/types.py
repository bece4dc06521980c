"""Plain values the management client returns (the console never sees protobuf messages)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """GetInfo: who the agent is and what it can run."""

    agent_id: str
    name: str
    host: str
    arch: str
    profile: str
    runtimes: tuple[str, ...]
    agent_version: str
    uptime_s: float
    api_version: str
    inference_address: str
    allow_unsigned: bool
    keep_versions: int


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """One model version on the agent's disk."""

    model: str
    version: int
    active: bool
    state: str
    stored_state: str
    profile: str
    backend: str
    load_ms: float | None
    rss_delta_bytes: int | None
    load_error: str
    size_bytes: int
    added_at: float
    response_cache: bool = False
    cache_hits: int = 0
    cache_misses: int = 0

    @property
    def cache_hit_rate(self) -> float | None:
        """Hits over lookups since the version was loaded; None before any lookup."""
        lookups = self.cache_hits + self.cache_misses
        return self.cache_hits / lookups if lookups else None


@dataclass(frozen=True, slots=True)
class DeployCheck:
    """CheckDeploy: whether the agent would accept a bundle, and if not why (``refusal``:
    unsigned, no_trust, untrusted_key, incompatible, version_conflict, already_active,
    no_space, too_large, invalid_bundle) and what fixes it (in ``message``)."""

    ok: bool
    message: str
    refusal: str = ""
    model: str = ""
    version: int = 0
    backend: str = ""
    key_id: str = ""


@dataclass(frozen=True, slots=True)
class StepInfo:
    """One step a deployment reached."""

    step: str
    ok: bool
    message: str
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class DeploymentInfo:
    """One deployment (deploy, rollback, activate, remove, auto-rollback) and its steps."""

    id: int
    model: str
    kind: str
    from_version: int | None
    to_version: int | None
    status: str
    last_step: str
    reason: str
    started_at: float
    ended_at: float | None
    steps: tuple[StepInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class DeployResult:
    """How a deploy/activate/rollback/remove ended."""

    ok: bool
    message: str
    active_version: int | None
    deployment: DeploymentInfo | None


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """Metrics of one model (version None: all versions) over one step."""

    ts: int
    step_s: int
    model: str
    version: int | None
    requests: int
    errors: int
    requests_per_s: float
    error_rate: float
    mean_batch: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    queue_p99_ms: float | None


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """One live second: points per model version and a system sample (or None)."""

    ts: int
    points: tuple[MetricPoint, ...]
    system: dict[str, float] | None = field(default=None)


def to_jsonable(value: Any) -> Any:
    """A dataclass (or list of them) as plain JSON-ready data."""
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return value
