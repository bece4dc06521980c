"""Real CNN bundles for the orchestration tests (built once per session with edge-pack)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from tests.support.model_factory import LIGHT_BUILD, light_model_path

PROFILE = "x86_64-cpu-onnxruntime"
CNNS = ("squeezenet", "shufflenet", "inception_v1")


@dataclass
class CnnBundles:
    public_key: Path
    private_key: Path
    cnn: dict[str, Path]  # model name -> version 1 bundle
    second: dict[str, Path]  # model name -> version 2 bundle (same graph)


@pytest.fixture(scope="session")
def cnn_bundles(tmp_path_factory: pytest.TempPathFactory) -> CnnBundles:
    root = tmp_path_factory.mktemp("orch-bundles")
    private, public = generate_keypair(root / "keys")
    cnn, second = {}, {}
    for name in CNNS:
        for version, into in ((1, cnn), (2, second)):
            (into[name],) = build_bundles(light_model_path(name), name=name, version=version,
                                          profiles=[PROFILE], out_dir=root / "bundles",
                                          key_path=private, dynamic_batch=True, **LIGHT_BUILD)
    return CnnBundles(public, private, cnn, second)
