"""Warm-up executions that run on every instance before a version is marked READY."""

from __future__ import annotations

import numpy as np

from edge_agent.backends.base import Backend
from edge_agent.errors import BackendError
from packager.bundle.datatypes import numpy_dtype
from packager.bundle.manifest import BatchingConfig, TensorSpec


def warmup_inputs(specs: tuple[TensorSpec, ...], rows: int, *, batched: bool,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs shaped from the signature: dim 0 is ``rows`` when batched, other -1 dims 1."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = [d if d >= 0 else 1 for d in spec.shape]
        if batched and shape:
            shape[0] = rows
        dtype = numpy_dtype(spec.datatype)
        if dtype.kind == "f":
            out[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "O":
            out[spec.name] = np.full(shape, b"", dtype=object)
        else:
            out[spec.name] = np.zeros(shape, dtype=dtype)
    return out


def warmup_sizes(batching: BatchingConfig) -> tuple[int, ...]:
    """Batch 1 and the largest preferred size (or none for an unbatched model)."""
    if batching.max_batch_size <= 0:
        return (1,)
    sizes = [1]
    if batching.preferred_batch_sizes:
        sizes.append(batching.preferred_batch_sizes[-1])
    return tuple(dict.fromkeys(sizes))


def run_warmup(backend: Backend, model: str, version: int, batching: BatchingConfig,
               instances: int) -> None:
    """Run each warm-up size on each instance; check every output is there with its rows."""
    batched = batching.max_batch_size > 0
    for rows in warmup_sizes(batching):
        feed = warmup_inputs(backend.inputs, rows, batched=batched)
        for instance in range(max(1, instances)):
            result = backend.infer(feed, instance)
            for spec in backend.outputs:
                array = result.get(spec.name)
                if array is None:
                    raise BackendError(
                        f"model {model!r} version {version}: warm-up produced no output "
                        f"{spec.name!r}")
                if batched and (array.ndim == 0 or array.shape[0] != rows):
                    raise BackendError(
                        f"model {model!r} version {version}: warm-up with {rows} rows gave "
                        f"output {spec.name!r} of shape {list(array.shape)}; the artifact does "
                        f"not batch along dim 0 as max_batch_size "
                        f"{batching.max_batch_size} requires")
