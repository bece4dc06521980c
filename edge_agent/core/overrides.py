"""Per-model settings the agent's configuration may lay over a bundle's manifest."""

from __future__ import annotations

from dataclasses import dataclass

from packager.bundle.manifest import BatchingConfig

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
    ``openvino_hint`` / ``openvino_streams`` replace the bundle's OpenVINO ``performance_hint``
    and the stream count (default: one stream per instance) when OpenVINO serves the model.
    ``priority`` (1 highest; None: core/gate.py's DEFAULT_PRIORITY) orders this model's
    executions against other models' when they wait for the device-wide execution gate.
    ``load`` ("eager": at start; "on-demand": by the first request, which waits up to
    ``load_timeout_ms``), ``idle_unload_s`` (unload after that long unused; None: never),
    ``pinned`` (never unloaded to make room or when idle) and ``version_policy`` (which versions
    a KServe RepositoryModelLoad loads: "active", "all", "latest N", "specific V,V") are the
    orchestration settings (core/orchestrator.py).
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
    openvino_hint: str | None = None
    openvino_streams: int | None = None
    priority: int | None = None
    load: str = "eager"
    load_timeout_ms: int | None = None
    idle_unload_s: float | None = None
    pinned: bool = False
    version_policy: str = "active"

    def execution_timeout_s(self) -> float:
        """Seconds one backend execution may run before it is cancelled (0: no limit)."""
        ms = (self.execution_timeout_ms if self.execution_timeout_ms is not None
              else DEFAULT_EXECUTION_TIMEOUT_MS)
        return max(0, ms) / 1000


DEFAULT_LOAD_TIMEOUT_MS = 30_000
"""How long a request waits for an on-demand load before it is answered UNAVAILABLE."""

LOAD_MODES = ("eager", "on-demand")


def load_timeout_s(overrides: ModelOverrides) -> float:
    """Seconds a request waits for its model to load on demand."""
    ms = overrides.load_timeout_ms
    return (DEFAULT_LOAD_TIMEOUT_MS if ms is None else ms) / 1000


def parse_version_policy(policy: str) -> tuple[str, tuple[int, ...]]:
    """``"active"``, ``"all"``, ``"latest N"`` or ``"specific V,V"`` as (kind, numbers);
    ValueError with the accepted forms otherwise (Triton's version_policy, as one string)."""
    kind, _, rest = policy.strip().partition(" ")
    numbers = tuple(int(x) for x in rest.replace(",", " ").split() if x.isdigit())
    bad = [x for x in rest.replace(",", " ").split() if not x.isdigit()]
    if kind in ("active", "all") and not rest.strip():
        return kind, ()
    if kind == "latest" and len(numbers) == 1 and numbers[0] > 0 and not bad:
        return kind, numbers
    if kind == "specific" and numbers and not bad:
        return kind, numbers
    raise ValueError(f"version_policy {policy!r} is not one of \"active\", \"all\", "
                     "\"latest N\" (N >= 1) or \"specific V,V,...\"")


def policy_versions(policy: str, on_disk: list[int], active: int | None) -> list[int]:
    """The versions ``policy`` selects among ``on_disk`` (``active``: the committed one)."""
    kind, numbers = parse_version_policy(policy)
    if kind == "all":
        return sorted(on_disk)
    if kind == "latest":
        return sorted(on_disk)[-numbers[0]:]
    if kind == "specific":
        return [v for v in sorted(on_disk) if v in numbers]
    if active is not None:
        return [active] if active in on_disk else []
    return sorted(on_disk)[-1:]


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
