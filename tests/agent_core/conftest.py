"""Shared, session-scoped real bundles for the serving-core tests (built once, ~3 s)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest

from tests.support.core_bundles import build
from tests.support.model_factory import conditioned_light_model, make_mlp
from tests.support.spin_model import make_spin_model


@dataclass
class Bundles:
    """Bundle paths and their source models. The squeezenet bundle is built on first use, so
    that a squeezenet build failure fails only the tests that serve squeezenet."""

    mlp_v1: Path
    mlp_v2: Path
    mlp_v3: Path
    mlp_fixed: Path
    spin: Path
    mlp_v1_onnx: Path
    mlp_v2_onnx: Path
    mlp_v3_onnx: Path
    mlp_fixed_onnx: Path
    squeezenet_onnx: Path
    out_dir: Path = field(repr=False)

    @cached_property
    def squeezenet(self) -> Path:
        return build(self.squeezenet_onnx, self.out_dir, "squeezenet", 1, max_batch=4)


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    d = tmp_path_factory.mktemp("core-bundles")
    out = d / "out"
    v1 = make_mlp(d / "mlp_v1.onnx", seed=1)
    v2 = make_mlp(d / "mlp_v2.onnx", seed=2)
    v3 = make_mlp(d / "mlp_v3.onnx", seed=3)
    fixed = make_mlp(d / "mlp_fixed.onnx", seed=4, dynamic_batch=False)
    spin = make_spin_model(d / "spin.onnx")
    sq = conditioned_light_model("squeezenet", d)
    return Bundles(
        mlp_v1=build(v1, out, "mlp", 1),
        mlp_v2=build(v2, out, "mlp", 2),
        mlp_v3=build(v3, out, "mlp", 3),
        mlp_fixed=build(fixed, out, "fixed", 1, dynamic_batch=False),
        spin=build(spin, out, "spin", 1),
        mlp_v1_onnx=v1, mlp_v2_onnx=v2, mlp_v3_onnx=v3, mlp_fixed_onnx=fixed,
        squeezenet_onnx=sq, out_dir=out,
    )
