"""How the per-model settings of the agent's configuration (:class:`ModelOverrides`) act on a
bundle's manifest: the effective batching, the versions a policy selects, load timeouts."""

from __future__ import annotations

from edge_agent.config.models import (
    DEFAULT_LOAD_TIMEOUT_MS,
    DEFAULT_MAX_QUEUE_SIZE,
    ModelOverrides,
    parse_version_policy,
)
from packager.bundle.manifest import BatchingConfig, Manifest


def load_timeout_s(overrides: ModelOverrides) -> float:
    """Seconds a request waits for its model to load on demand."""
    ms = overrides.load_timeout_ms
    return (DEFAULT_LOAD_TIMEOUT_MS if ms is None else ms) / 1000


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


def batch_ceiling(manifest: Manifest) -> int | None:
    """The largest ``max_batch_size`` the model's artifact allows: 0 for a model without a
    batch dimension; the smallest fixed dim 0 among its tensors (or the TensorRT build spec's
    ``max_batch``) when there is one; None when dim 0 is dynamic everywhere (any size)."""
    if manifest.batching.max_batch_size <= 0:
        return 0
    fixed = [t.shape[0] for t in (*manifest.inputs, *manifest.outputs)
             if t.shape and t.shape[0] > 0]
    engine = manifest.backend_options.get("tensorrt", {}).get("max_batch")
    if isinstance(engine, int) and not isinstance(engine, bool) and engine > 0:
        fixed.append(engine)
    return min(fixed) if fixed else None


def max_batch_problem(manifest: Manifest, value: int) -> str | None:
    """Why ``value`` cannot be the ``max_batch_size`` of ``manifest``'s model; None if it can."""
    ceiling = batch_ceiling(manifest)
    if ceiling == 0:
        return None if value == 0 else (f"model {manifest.name!r} has no batch dimension "
                                         "(max_batch_size 0 in its bundle)")
    if value < 1:
        return f"model {manifest.name!r} batches along dim 0: max_batch_size must be at least 1"
    if ceiling is not None and value > ceiling:
        return (f"model {manifest.name!r}'s batch dimension allows at most {ceiling} "
                "(fixed in its artifact)")
    return None


def effective_batching(manifest_batching: BatchingConfig, overrides: ModelOverrides | None,
                       ceiling: int | None = None) -> BatchingConfig:
    """The manifest's BatchingConfig with ``overrides`` applied and defaults filled in.

    An overriding ``max_batch_size`` may lower or raise the manifest's, up to ``ceiling``
    (:func:`batch_ceiling`; None: no bound); a model without a batch dimension stays at 0.
    """
    b = manifest_batching
    o = overrides or ModelOverrides()
    max_batch = b.max_batch_size
    if o.max_batch_size is not None and max_batch > 0:
        wanted = o.max_batch_size if ceiling is None else min(ceiling, o.max_batch_size)
        max_batch = max(1, wanted)
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
