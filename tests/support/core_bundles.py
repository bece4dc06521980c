"""Real bundles for serving-core tests: built with edge-pack's library, extracted like the agent.

``build`` runs the packager (conversion to OpenVINO IR and ONNX Runtime artifacts, parity
check); ``install`` extracts a bundle to ``<state_dir>/models/NAME/VERSION/``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from packager.build import build_bundles
from packager.bundle.reader import open_bundle

PROFILE = "x86_64-cpu-openvino"  # OpenVINO IR + ONNX Runtime fallback artifact


def build(model_path: Path, out_dir: Path, name: str, version: int, *,
          dynamic_batch: bool = True, max_batch: int | None = 8,
          profile: str = PROFILE, allow_parity_failure: bool = False) -> Path:
    """Build one bundle of ``model_path`` for ``profile``; return its path."""
    (path,) = build_bundles(model_path, name=name, version=version, profiles=[profile],
                            out_dir=out_dir, dynamic_batch=dynamic_batch,
                            max_batch=max_batch if dynamic_batch else None,
                            allow_parity_failure=allow_parity_failure)
    return path


def install(bundle: Path, state_dir: Path) -> Path:
    """Extract ``bundle`` to ``state_dir/models/NAME/VERSION`` (hashes checked on the way)."""
    with open_bundle(bundle) as reader:
        m = reader.manifest
        return reader.extract(Path(state_dir) / "models" / m.name / str(m.version))


def reference_outputs(onnx_path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of the source model run in-process by ONNX Runtime (the parity reference)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs), strict=True))
