"""Version selection and the hot-swap primitives under concurrent load, on real bundles."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.errors import ModelNotFoundError, ModelUnavailableError
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install, reference_outputs
from tests.support.eventually import eventually

X = np.random.default_rng(42).standard_normal((2, 64)).astype(np.float32)


def _refs(bundles: Bundles) -> dict[int, np.ndarray]:
    return {v: reference_outputs(p, {"input": X})["probs"]
            for v, p in ((1, bundles.mlp_v1_onnx), (2, bundles.mlp_v2_onnx),
                         (3, bundles.mlp_v3_onnx))}


def test_default_is_the_highest_ready_version_unless_pinned(bundles: Bundles,
                                                            tmp_path: Path) -> None:
    for b in (bundles.mlp_v1, bundles.mlp_v2):
        install(b, tmp_path)
    refs = _refs(bundles)
    dp = DataPlane(tmp_path, default_overrides=ModelOverrides(backend="onnxruntime"))
    try:
        assert dp.repository.default_version("mlp") == 2
        assert dp.model_metadata("mlp").versions == (1, 2)
        r = dp.infer(InferRequest("mlp", {"input": X}), 30)
        assert r.version == 2
        np.testing.assert_allclose(r.outputs["probs"], refs[2], rtol=1e-4, atol=1e-5)
        r1 = dp.infer(InferRequest("mlp", {"input": X}, version=1), 30)
        assert r1.version == 1
        np.testing.assert_allclose(r1.outputs["probs"], refs[1], rtol=1e-4, atol=1e-5)
    finally:
        dp.close()
    pinned = DataPlane(tmp_path, overrides={"mlp": ModelOverrides(default_version=1)})
    try:
        assert pinned.infer(InferRequest("mlp", {"input": X}), 30).version == 1
        pinned.repository.set_default("mlp", None)
        assert pinned.infer(InferRequest("mlp", {"input": X}), 30).version == 2
        with pytest.raises(ModelUnavailableError, match="version 7 is not READY"):
            pinned.repository.set_default("mlp", 7)
    finally:
        pinned.close()


def test_load_unload_model_and_index(bundles: Bundles, tmp_path: Path) -> None:
    install(bundles.mlp_v1, tmp_path)
    dp = DataPlane(tmp_path)
    try:
        dp.unload_model("mlp")
        assert not dp.model_ready("mlp")
        assert [(e.name, e.state, e.reason) for e in dp.repository_index()] == [
            ("mlp", "UNAVAILABLE", "not loaded")]
        with pytest.raises(ModelNotFoundError):
            dp.submit(InferRequest("mlp", {"input": X}))
        install(bundles.mlp_v2, tmp_path)
        dp.load_model("mlp")  # version_policy "active": without a manager, the highest
        assert [(e.version, e.state) for e in dp.repository_index()] == [
            (1, "UNAVAILABLE"), (2, "READY")]
        assert dp.infer(InferRequest("mlp", {"input": X}), 30).version == 2
        with pytest.raises(ModelNotFoundError):
            dp.load_model("absent")
    finally:
        dp.close()
    assert not dp.live()


@pytest.mark.parametrize(("backend", "method"), [
    ("onnxruntime", "submit"), ("openvino", "submit"), ("onnxruntime", "infer")])
def test_swap_under_load_drops_nothing_and_never_mixes_versions(
        bundles: Bundles, tmp_path: Path, backend: str, method: str) -> None:
    install(bundles.mlp_v1, tmp_path)
    refs = _refs(bundles)
    dp = DataPlane(tmp_path, default_overrides=ModelOverrides(backend=backend))
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []
    wrong: list[int] = []

    def caller() -> None:
        while not stop.is_set():
            try:
                req = InferRequest("mlp", {"input": X})
                r = dp.submit(req).result(60) if method == "submit" else dp.infer(req, 60)
            except BaseException as exc:
                errors.append(exc)
                return
            seen.append(r.version)
            if not np.allclose(r.outputs["probs"], refs[r.version], rtol=1e-4, atol=1e-5):
                wrong.append(r.version)

    threads = [threading.Thread(target=caller) for _ in range(8)]
    try:
        for t in threads:
            t.start()

        def wait_for(version: int) -> None:
            start = len(seen)

            def served() -> bool:
                assert not errors, errors
                return sum(1 for v in seen[start:] if v == version) >= 20

            eventually(served, timeout=60, interval=0.01,
                       message=f"version {version} never served")

        wait_for(1)
        for bundle, new, old in ((bundles.mlp_v2, 2, 1), (bundles.mlp_v3, 3, 2)):
            install(bundle, tmp_path)
            mv = dp.repository.load_version("mlp", new)  # next to the old one
            assert mv.state.value == "READY"
            assert dp.repository.default_version("mlp") == new  # switched atomically
            assert dp.repository.unload_version("mlp", old)  # drained every in-flight request
            assert [e.version for e in dp.repository_index(ready_only=True)] == [new]
            wait_for(new)
        # rollback-style switch: load an older version and pin it
        mv = dp.repository.load_version("mlp", 2)
        dp.repository.set_default("mlp", 2)
        wait_for(2)
        assert dp.repository.unload_version("mlp", 3)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        dp.close()
    assert not errors, errors
    assert not wrong
    assert {1, 2, 3} <= set(seen)
