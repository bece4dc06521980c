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
    memory_budget_bytes: int | None = None  # [agent] memory_budget_mib (None: no budget)
    memory_used_bytes: int = 0  # what the loaded versions take (their memory figures)


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
    parity: tuple[bool, str] | None = None  # the last on-device parity check: (agreed, figures)
    memory_bytes: int = 0  # the figure the memory budget uses
    memory_source: str = ""  # measured on this device, by edge-pack build, artifact size
    load_mode: str = "eager"
    pinned: bool = False
    residency: str = ""  # "loaded", or why not
    loads: int = 0
    unloads: int = 0
    load_waits: int = 0  # requests that waited for a load
    load_wait_ms: float = 0.0  # their total wait
    response_cache: bool = False
    cache_hits: int = 0
    cache_misses: int = 0
    cancelled_requests: int = 0  # since loaded: callers that left before their request ran
    sequences_active: int = 0  # a stateful version's live sequences
    sequence_slots: int = 0  # its model's sequence slots; 0: not stateful

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


@dataclass(frozen=True, slots=True)
class DoctorFinding:
    """One check of the device doctor; ``status`` is ok, info, warn or fail."""

    area: str
    check: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """GetDoctor: what the device is and can run (``ok``: no check failed)."""

    ok: bool
    findings: tuple[DoctorFinding, ...]


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of the agent's own log (StreamLogs)."""

    seq: int
    ts: float
    level: str
    logger: str
    message: str


@dataclass(frozen=True, slots=True)
class SystemPoint:
    """Stored device samples averaged over one step (``temp_c`` None where not reported)."""

    ts: int
    step_s: int
    cpu_percent: float
    mem_percent: float
    rss_bytes: int
    temp_c: float | None
    disk_free_bytes: int


@dataclass(frozen=True, slots=True)
class SettingInfo:
    """One setting of a model: its value (a TOML literal, "" when unset) and its source."""

    key: str
    value: str
    source: str


@dataclass(frozen=True, slots=True)
class TuningInfo:
    """One stored tuning run (``data`` is the decoded JSON of every candidate)."""

    id: int
    model: str
    at: float
    summary: str
    data: dict[str, Any]


def to_jsonable(value: Any) -> Any:
    """A dataclass (or list of them) as plain JSON-ready data."""
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return value
