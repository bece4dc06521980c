"""Eviction never fails a request: two real CNNs hammered at once under a budget that holds
one of them (the data plane the gRPC edge calls, ONNX Runtime in-process)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.residency import MIB
from edge_agent.core.types import InferRequest
from packager.bundle.reader import open_bundle
from tests.orchestration.conftest import CnnBundles

MODELS = {"squeezenet": "data_0", "shufflenet": "gpu_0/data_0"}


def test_models_evicted_for_each_other_answer_every_request(tmp_path: Path,
                                                            cnn_bundles: CnnBundles) -> None:
    for name in MODELS:
        with open_bundle(cnn_bundles.cnn[name]) as reader:
            reader.extract(tmp_path / "models" / name / "1")
    overrides = {name: ModelOverrides(isolation="thread", instances=1) for name in MODELS}
    dp = DataPlane(tmp_path, overrides=overrides, memory_budget_bytes=100 * MIB,
                   autoload=False)
    for name in MODELS:  # figures that make the budget hold one (measurements only add)
        dp.orchestrator.seed(name, 1, 60 * MIB)
    dp.load_all()
    errors: list[BaseException] = []
    answered: dict[str, int] = dict.fromkeys(MODELS, 0)
    over_budget: list[int] = []

    def hammer(name: str) -> None:
        x = {MODELS[name]: np.zeros((1, 3, 224, 224), np.float32)}
        for _ in range(8):
            try:
                result = dp.infer(InferRequest(name, x), timeout_s=300)
                assert result.model == name
                answered[name] += 1
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)
            used = dp.orchestrator.used_bytes()
            if used > 100 * MIB:
                over_budget.append(used)

    try:
        threads = [threading.Thread(target=hammer, args=(n,)) for n in MODELS for _ in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not errors, errors[:3]
        assert answered == dict.fromkeys(MODELS, 16)
        assert not over_budget
        assert sum(dp.orchestrator.stats(n).unloads for n in MODELS) >= 1
    finally:
        dp.close()
