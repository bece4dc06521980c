"""The deploy lifecycle's settings: how the model manager verifies, keeps and watches versions
(one frozen value, drawn from ``[management]`` by :meth:`AgentConfig.deploy`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ManagerSettings:
    """How the manager verifies, keeps and watches versions."""

    trusted_keys: tuple[Path, ...] = ()
    allow_unsigned: bool = False
    keep_versions: int = 3  # per model, on disk (the active and the rollback target always kept)
    watch_window_s: float = 60.0  # after a deploy, how long the error rate is watched
    error_threshold: float = 0.5  # error rate that triggers an automatic rollback
    min_requests: int = 20  # requests needed in the window before the rate counts
    drain_timeout_s: float = 30.0
    probe_timeout_s: float = 30.0
    profile: str | None = None  # the profile this device reports (None: detected)
