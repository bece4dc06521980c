"""The health probe: one real inference on a loaded version, shaped from its signature."""

from __future__ import annotations

import concurrent.futures

import numpy as np

from edge_agent.core.repository import LoadedVersion
from edge_agent.core.warmup import warmup_inputs
from edge_agent.deploy.errors import DeployStepFailedError
from edge_agent.errors import AgentError


def probe_version(mv: LoadedVersion, timeout_s: float = 30.0) -> str:
    """Run one request (batch 1, seeded inputs) through exactly this version's batcher and
    check every output is there, with one row, and finite.

    Returns a one-line summary; raises DeployStepFailedError naming what was wrong.
    """
    manifest, batcher = mv.manifest, mv.batcher
    if not manifest.warmup:
        # a Python model or pipeline: made-up inputs need not be valid for its code
        return "not probed: its spec says made-up inputs do not suit it (warmup = false)"
    batched = manifest.batching.max_batch_size > 0
    inputs = warmup_inputs(manifest.inputs, 1, batched=batched, seed=7)
    where = f"health probe of {mv.name} version {mv.version}"
    try:
        result = batcher.submit(inputs, 1, request_id="health-probe").result(timeout_s)
    except AgentError as exc:
        raise DeployStepFailedError(f"{where} failed: {exc}") from exc
    except concurrent.futures.TimeoutError:
        raise DeployStepFailedError(f"{where} got no answer within {timeout_s:.0f} s") from None
    parts = []
    for spec in manifest.outputs:
        array = result.outputs.get(spec.name)
        if array is None:
            raise DeployStepFailedError(f"{where}: output {spec.name!r} is missing")
        if batched and (array.ndim == 0 or array.shape[0] != 1):
            raise DeployStepFailedError(f"{where}: output {spec.name!r} has shape "
                                        f"{list(array.shape)}, expected one row")
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise DeployStepFailedError(f"{where}: output {spec.name!r} holds NaN or "
                                        "infinite values")
        parts.append(f"{spec.name} {list(array.shape)}")
    return "one real inference ok: " + ", ".join(parts)
