"""Per-model settings the agent's configuration may lay over a bundle's manifest."""

from __future__ import annotations

from dataclasses import dataclass

from packager.manifest import BatchingConfig

DEFAULT_MAX_QUEUE_SIZE = 1024
"""Queue bound (requests) used when neither the manifest nor the agent config sets one."""

DEFAULT_EXECUTION_TIMEOUT_MS = 60_000
"""How long one backend execution may run before it is cancelled (0 in the config: never)."""


@dataclass(frozen=True, slots=True)
class ModelOverrides:
    """Agent-config overrides for one model; None keeps the manifest's value.

    ``max_batch_size`` may only lower the manifest's value (the artifact fixes the upper bound).
    ``default_version`` pins the version served when a request names none. ``backend`` and
    ``device`` replace the manifest's backend choice and the runtime's default device.
    ``response_cache`` serves repeated requests from the agent's response cache (core/cache.py);
    None follows the bundle's manifest (``edge-pack build --response-cache``).
    """

    max_batch_size: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    max_queue_delay_us: int | None = None
    instances: int | None = None
    threads: int | None = None
    max_queue_size: int | None = None
    default_timeout_us: int | None = None
    allow_timeout_override: bool | None = None
    default_version: int | None = None
    backend: str | None = None
    device: str | None = None
    warmup: bool = True
    execution_timeout_ms: int | None = None
    isolation: str = "auto"
    response_cache: bool | None = None

    def execution_timeout_s(self) -> float:
        """Seconds one backend execution may run before it is cancelled (0: no limit)."""
        ms = (self.execution_timeout_ms if self.execution_timeout_ms is not None
              else DEFAULT_EXECUTION_TIMEOUT_MS)
        return max(0, ms) / 1000


def effective_batching(manifest_batching: BatchingConfig,
                       overrides: ModelOverrides | None) -> BatchingConfig:
    """The manifest's BatchingConfig with ``overrides`` applied and defaults filled in."""
    b = manifest_batching
    o = overrides or ModelOverrides()
    max_batch = b.max_batch_size
    if o.max_batch_size is not None and max_batch > 0:
        max_batch = max(1, min(max_batch, o.max_batch_size))
    preferred = o.preferred_batch_sizes if o.preferred_batch_sizes is not None \
        else b.preferred_batch_sizes
    preferred = tuple(sorted({p for p in preferred if 0 < p <= max_batch}))
    queue_size = o.max_queue_size if o.max_queue_size is not None else b.max_queue_size
    return BatchingConfig(
        max_batch_size=max_batch,
        preferred_batch_sizes=preferred,
        max_queue_delay_us=max(0, o.max_queue_delay_us if o.max_queue_delay_us is not None
                               else b.max_queue_delay_us),
        instances=max(1, o.instances if o.instances is not None else b.instances),
        threads=max(0, o.threads if o.threads is not None else b.threads),
        max_queue_size=queue_size if queue_size > 0 else DEFAULT_MAX_QUEUE_SIZE,
        default_timeout_us=max(0, o.default_timeout_us if o.default_timeout_us is not None
                               else b.default_timeout_us),
        allow_timeout_override=(o.allow_timeout_override if o.allow_timeout_override is not None
                                else b.allow_timeout_override),
    )
