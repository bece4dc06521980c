"""Plain values the manager reports: step events, deployment outcomes, version views."""

from __future__ import annotations

from dataclasses import dataclass, field

from edge_agent.state.records import Deployment


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One step a deployment reached (``ok`` False: the step failed), as it happens."""

    deployment_id: int
    step: str
    ok: bool
    message: str


@dataclass(frozen=True, slots=True)
class DeployOutcome:
    """How a deployment ended: the recorded deployment (with its steps) and a summary line."""

    deployment: Deployment
    ok: bool
    message: str
    active_version: int | None


@dataclass(frozen=True, slots=True)
class VersionView:
    """One model version as ListModels shows it: on disk, loaded or not, active or not."""

    model: str
    version: int
    active: bool
    state: str  # Triton's names (READY, UNAVAILABLE, ...); a version not in memory: UNAVAILABLE
    stored_state: str
    profile: str = ""
    backend: str = ""
    load_ms: float | None = None
    rss_delta_bytes: int | None = None
    load_error: str = ""
    size_bytes: int = 0
    added_at: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)
    parity: tuple[bool, str] | None = None  # the last on-device parity check: (agreed, figures)
    memory_bytes: int = 0
    memory_source: str = ""
    load_mode: str = "eager"
    pinned: bool = False
    residency: str = ""
    loads: int = 0
    unloads: int = 0
    load_waits: int = 0
    load_wait_ms: float = 0.0
    response_cache: bool = False  # served behind the response cache
    cache_hits: int = 0  # since loaded
    cache_misses: int = 0
    cancelled_requests: int = 0  # since loaded: callers that left before their request ran
    sequences_active: int = 0  # a stateful version's live sequences
    sequence_slots: int = 0  # its model's slots (max_candidate_sequences); 0: not stateful
