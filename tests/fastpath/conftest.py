"""Real MLP bundles (ONNX Runtime profile, built once per session) for the fast-path tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agent_core.bundles import build
from tests.model_factory import make_mlp

ORT = "x86_64-cpu-onnxruntime"


@dataclass(frozen=True)
class MlpBundles:
    """Two versions of one MLP with different weights, and their source models."""

    v1: Path
    v2: Path
    v1_onnx: Path
    v2_onnx: Path


@pytest.fixture(scope="session")
def mlp_bundles(tmp_path_factory: pytest.TempPathFactory) -> MlpBundles:
    d = tmp_path_factory.mktemp("fastpath-bundles")
    v1 = make_mlp(d / "mlp_v1.onnx", seed=1)
    v2 = make_mlp(d / "mlp_v2.onnx", seed=2)
    out = d / "out"
    return MlpBundles(v1=build(v1, out, "mlp", 1, profile=ORT),
                      v2=build(v2, out, "mlp", 2, profile=ORT), v1_onnx=v1, v2_onnx=v2)
