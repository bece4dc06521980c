"""``edge-agent check BUNDLE``: the deploy pipeline's parity check, offline, with no agent.

The bundle must fit this device as a deploy requires (its arch, a runtime for its backend:
the same rule as ``add-bundle`` and deploy); it is verified (file hashes; the signature when
keys are given), extracted to a temporary directory, loaded on the backend this device would
serve it with, warmed up, and its reference inputs run and compared with the source model's
outputs (see :mod:`edge_agent.deploy.device_parity`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edge_agent.backends.base import BackendOptions
from edge_agent.backends.registry import load_backend
from edge_agent.core.warmup import run_warmup
from edge_agent.deploy.compat import check_fits
from edge_agent.deploy.device import detect_device
from edge_agent.deploy.device_parity import ParityResult, run_reference
from packager.bundle.manifest import Manifest
from packager.bundle.reader import open_bundle


def check_bundle(bundle: Path, trusted_keys: Sequence[Path] = (), *,
                 backend: str | None = None) -> tuple[ParityResult, str]:
    """Run a bundle's reference data on this device: (the result, what was verified).

    Raises a PackagerError (bad bundle or signature) or an AgentError (built for another
    device: IncompatibleBundleError, as a deploy; cannot load or run).
    """
    with open_bundle(bundle) as reader:
        check_fits(reader.manifest, detect_device())  # the rule (and message) deploy applies
        if trusted_keys:
            key = reader.verify_signature(trusted_keys)
            verified = f"signed by trusted key {key}"
        else:
            verified = "signature not checked (no --trust)"
        reader.verify_files()
        with tempfile.TemporaryDirectory(prefix="edge-agent-check-") as tmp:
            model_dir = reader.extract(Path(tmp) / "bundle")
            return _run(model_dir, reader.manifest, backend), verified


def _run(model_dir: Path, manifest: Manifest, preferred: str | None) -> ParityResult:
    loaded = load_backend(model_dir, manifest, BackendOptions(instances=1), preferred)
    try:
        run_warmup(loaded, manifest.name, manifest.version, manifest.batching, 1)

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return dict(loaded.infer(feeds, 0))

        return run_reference(model_dir, manifest, run, loaded.name)
    finally:
        loaded.close()
