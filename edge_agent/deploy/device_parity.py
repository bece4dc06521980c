"""Parity on the device: run a bundle's reference inputs on the runtime that serves it here and
compare with the source model's outputs stored at build time, within the profile's tolerance.

The same check runs in the deploy pipeline (on the loaded version's batcher, after warm-up) and
offline in ``edge-agent check BUNDLE`` (on a backend loaded for the purpose).
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.core.repository import LoadedVersion
from edge_agent.deploy.errors import DeployStepFailedError
from edge_agent.errors import AgentError
from packager.bundle.errors import PackagerError
from packager.bundle.manifest import Manifest
from packager.bundle.parity import (
    REFERENCE_FILE,
    Runner,
    check_reference,
    load_reference,
    summary,
)
from packager.bundle.profiles import ParityTolerance

NO_REFERENCE = "no reference data in this bundle (built before edge-pack stored it); not checked"


@dataclass(frozen=True)
class ParityResult:
    """The outcome of one check: ``passed`` None when the bundle carries no reference data."""

    passed: bool | None
    message: str
    report: dict[str, Any] | None = None


def tolerance_of(manifest: Manifest) -> ParityTolerance:
    """The profile's tolerance as the bundle recorded it at build time."""
    t = manifest.parity.get("tolerance") or {}
    try:
        return ParityTolerance(float(t["atol"]), float(t["rtol"]),
                               float(t.get("min_top1_agreement", 1.0)),
                               bool(t.get("top1_only", False)))
    except (KeyError, TypeError, ValueError):
        raise DeployStepFailedError(f"{manifest.name} version {manifest.version}: the manifest's "
                                    "parity.tolerance is missing or malformed") from None


def run_reference(model_dir: Path, manifest: Manifest, run: Runner,
                  backend: str) -> ParityResult:
    """Check ``run`` (one version's model, as served here) against the reference data in
    ``model_dir``. Raises DeployStepFailedError when the data is unreadable or a run fails."""
    ref = manifest.parity.get("reference") or {}
    path = model_dir / str(ref.get("file", REFERENCE_FILE))
    if "file" not in ref:
        why = ref.get("omitted")
        return ParityResult(None, f"no reference data in this bundle ({why}); not checked"
                            if why else NO_REFERENCE)
    tol = tolerance_of(manifest)
    where = f"{manifest.name} version {manifest.version}"
    try:
        origin, cases = load_reference(path)
        report = check_reference(run, cases, tol)
    except (PackagerError, AgentError, OSError) as exc:
        raise DeployStepFailedError(f"parity check of {where} could not run: {exc}") from exc
    figures = summary(report, tol)
    if report["passed"]:
        return ParityResult(True, f"{backend} agrees with the source model on {origin} "
                            f"reference inputs: {figures}", report)
    return ParityResult(False, f"{backend} on this device disagrees with the source model on "
                        f"{origin} reference inputs: {figures}; the version is refused", report)


def batcher_runner(mv: LoadedVersion, timeout_s: float) -> Runner:
    """Run requests through exactly this version's batcher (as clients are served)."""
    batcher = mv.batcher
    batched = mv.manifest.batching.max_batch_size > 0

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = next(iter(feeds.values())).shape[0] if batched and feeds else 1
        try:
            result = batcher.submit(feeds, rows, request_id="parity-check").result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise DeployStepFailedError(f"parity check of {mv.name} version {mv.version} got "
                                        f"no answer within {timeout_s:.0f} s") from None
        return dict(result.outputs)

    return run


def check_loaded_version(mv: LoadedVersion, timeout_s: float = 30.0) -> str:
    """The deploy step: check a loaded, warmed version; its one-line figures, or
    DeployStepFailedError carrying them when the version disagrees."""
    result = run_reference(mv.path, mv.manifest, batcher_runner(mv, timeout_s),
                           mv.backend_name or mv.manifest.backend)
    if result.passed is False:
        raise DeployStepFailedError(result.message)
    return result.message
