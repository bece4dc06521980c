"""Plain values held by the state store: model versions on disk and deployment history."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class VersionState(StrEnum):
    """Lifecycle of one model version on this device."""

    STAGED = "staged"  # on disk, verified, not loaded
    LOADING = "loading"
    READY = "ready"  # loaded and serving (active or standby)
    UNLOADED = "unloaded"  # on disk, not in memory (e.g. the previous version kept for rollback)
    FAILED = "failed"  # load or warm-up failed; see load_error


class DeploymentKind(StrEnum):
    """What a deployment does to a model's active version."""

    DEPLOY = "deploy"
    ROLLBACK = "rollback"
    ACTIVATE = "activate"
    REMOVE = "remove"
    AUTO_ROLLBACK = "auto-rollback"
    SETTINGS = "settings"  # live settings: the active version reloaded with new settings


class DeploymentStatus(StrEnum):
    """Where a deployment ended (or that it has not)."""

    IN_PROGRESS = "in_progress"
    COMMITTED = "committed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # the agent died mid-deployment (found on the next open)


class Step(StrEnum):
    """Steps of a deployment, in their usual order."""

    RECEIVED = "received"
    VERIFIED = "verified"
    STAGED = "staged"
    LOADED = "loaded"
    WARMED = "warmed"
    PROBED = "probed"
    PARITY = "parity"  # the bundle's reference inputs checked against the source model
    SWITCHED = "switched"
    DRAINED = "drained"
    UNLOADED = "unloaded"
    COMMITTED = "committed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One model version on disk (``path`` is its extracted bundle directory)."""

    model: str
    version: int
    path: str
    manifest_sha256: str
    size_bytes: int
    state: VersionState = VersionState.STAGED
    load_ms: float | None = None
    rss_delta_bytes: int | None = None
    load_error: str | None = None
    added_at: float = 0.0


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step a deployment reached: ``ok`` False when that step failed."""

    step: Step
    ok: bool
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class Deployment:
    """One deployment (or rollback, activation, removal) and the steps it went through."""

    id: int
    model: str
    kind: DeploymentKind
    from_version: int | None
    to_version: int | None
    status: DeploymentStatus
    last_step: Step | None
    reason: str
    started_at: float
    ended_at: float | None
    steps: tuple[StepRecord, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class TuningRecord:
    """One tuning run of a model (``edge-agent tune``): its candidates and results as JSON."""

    id: int
    model: str
    at: float
    summary: str
    data: str  # JSON: the candidates, each with its settings and measured points
