"""Shared fixtures: real models, a key pair, and bundles built once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from tests.support.model_factory import LIGHT_BUILD, light_model_path, make_mlp

CPU_PROFILES = ("x86_64-cpu-openvino", "x86_64-cpu-onnxruntime", "arm64-cpu-onnxruntime")


@pytest.fixture(scope="session")
def pk_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("packager")


@pytest.fixture(scope="session")
def keypair(pk_dir: Path) -> tuple[Path, Path]:
    return generate_keypair(pk_dir / "keys")


@pytest.fixture(scope="session")
def other_keypair(pk_dir: Path) -> tuple[Path, Path]:
    return generate_keypair(pk_dir / "other-keys")


@pytest.fixture(scope="session")
def mlp_path(pk_dir: Path) -> Path:
    return make_mlp(pk_dir / "mlp.onnx", seed=7)


@pytest.fixture(scope="session")
def mlp_bundles(pk_dir: Path, mlp_path: Path, keypair: tuple[Path, Path]) -> dict[str, Path]:
    """Signed MLP bundles for every profile (the MLP has random weights: real parity)."""
    profiles = [*CPU_PROFILES, "x86_64-cpu-openvino-fp16", "arm64-cpu-onnxruntime-int8",
                "jetson-orin-tensorrt"]
    paths = build_bundles(mlp_path, name="mlp", version=3, profiles=profiles,
                          out_dir=pk_dir / "mlp-out", key_path=keypair[0])
    return dict(zip(profiles, paths, strict=True))


@pytest.fixture(scope="session")
def squeezenet_bundles(pk_dir: Path) -> dict[str, Path]:
    """Unsigned squeezenet bundles with the batch dim made dynamic."""
    profiles = [*CPU_PROFILES, "arm64-cpu-onnxruntime-int8", "jetson-orin-tensorrt"]
    paths = build_bundles(light_model_path("squeezenet"), name="squeezenet", version=1,
                          profiles=profiles, out_dir=pk_dir / "squeezenet-out",
                          dynamic_batch=True, **LIGHT_BUILD)
    return dict(zip(profiles, paths, strict=True))


@pytest.fixture(scope="session")
def shufflenet_bundles(pk_dir: Path) -> dict[str, Path]:
    """shufflenet (Reshapes pinned to batch 1) for OpenVINO and ONNX Runtime, dynamic batch."""
    profiles = ["x86_64-cpu-openvino", "x86_64-cpu-onnxruntime"]
    paths = build_bundles(light_model_path("shufflenet"), name="shufflenet", version=1,
                          profiles=profiles, out_dir=pk_dir / "shufflenet-out",
                          dynamic_batch=True, max_batch=8, **LIGHT_BUILD)
    return dict(zip(profiles, paths, strict=True))
