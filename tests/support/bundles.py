"""Real bundles for the management tests, built once per session with edge-pack's library.

MLP versions 1-3 (seeds 11, 22, 33: different outputs) signed for x86_64-cpu-onnxruntime, the
same model for arm64 (another arch), an unsigned build, and two misbehaving versions (NaN
outputs; Gather failures on large inputs). ``reference(version, x)`` is ONNX Runtime on the
source model of that MLP version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from packager.samples import make_mlp
from tests.support.models import make_fragile_model, make_nan_model

PROFILE = "x86_64-cpu-onnxruntime"
SEEDS = {1: 11, 2: 22, 3: 33}


@dataclass
class Bundles:
    root: Path
    public_key: Path
    private_key: Path
    mlp: dict[int, Path]  # version -> signed bundle
    sources: dict[int, Path]  # version -> source .onnx
    arm64: Path  # mlp version 4 for arm64-cpu-onnxruntime
    unsigned: Path  # mlp version 5, no signature
    nan: Path  # mlp version 6: NaN outputs
    fragile: Path  # mlp version 7: fails on inputs >= 21
    _sessions: dict[int, ort.InferenceSession] = field(default_factory=dict)

    def reference(self, version: int, x: np.ndarray) -> np.ndarray:
        if version not in self._sessions:
            self._sessions[version] = ort.InferenceSession(
                str(self.sources[version]), providers=["CPUExecutionProvider"])
        return self._sessions[version].run(None, {"input": x})[0]


def build_all(root: Path) -> Bundles:
    """Build every bundle the management and console tests use under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    private, public = generate_keypair(root / "keys")
    out = root / "bundles"
    mlp, sources = {}, {}
    for version, seed in SEEDS.items():
        src = make_mlp(root / f"mlp-{version}.onnx", seed=seed)
        sources[version] = src
        (mlp[version],) = build_bundles(src, name="mlp", version=version, profiles=[PROFILE],
                                        out_dir=out, key_path=private, dynamic_batch=True)
    (arm64,) = build_bundles(sources[1], name="mlp", version=4,
                             profiles=["arm64-cpu-onnxruntime"], out_dir=out, key_path=private,
                             dynamic_batch=True)
    (unsigned,) = build_bundles(sources[1], name="mlp", version=5, profiles=[PROFILE],
                                out_dir=out / "unsigned", dynamic_batch=True)
    (nan,) = build_bundles(make_nan_model(root / "nan.onnx"), name="mlp", version=6,
                           profiles=[PROFILE], out_dir=out, key_path=private,
                           dynamic_batch=True, allow_parity_failure=True)
    (fragile,) = build_bundles(make_fragile_model(root / "fragile.onnx"), name="mlp",
                               version=7, profiles=[PROFILE], out_dir=out, key_path=private,
                               dynamic_batch=True)
    return Bundles(root=root, public_key=public, private_key=private, mlp=mlp, sources=sources,
                   arm64=arm64, unsigned=unsigned, nan=nan, fragile=fragile)
