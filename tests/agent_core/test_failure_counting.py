"""Requests refused before they reach the queue count as failed requests of the version, as
Triton's failure counters count them: invalid inputs and a full queue alike (issue 17: an
error rate of 0.0 % after 8 rejected requests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.errors import InvalidInputError, QueueFullError
from packager.build import build_bundles
from packager.bundle.reader import open_bundle
from packager.samples import make_mlp
from tests.support.eventually import eventually


class Observed:
    """A real observer (the InferenceObserver protocol) that keeps what it is told."""

    def __init__(self) -> None:
        self.requests: list[bool] = []

    def record_request(self, model: str, version: int, *, ok: bool, rows: int, queue_ns: int,
                       compute_ns: int, total_ns: int) -> None:
        self.requests.append(ok)

    def record_batch(self, model: str, version: int, batch_size: int, compute_ns: int) -> None:
        return None


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[tuple[DataPlane, Observed]]:
    """mlp version 1 on ONNX Runtime: one instance, a queue of one, nothing runs inline."""
    src = make_mlp(tmp_path / "mlp.onnx", seed=5)
    (bundle,) = build_bundles(src, name="mlp", version=1, profiles=["x86_64-cpu-onnxruntime"],
                              out_dir=tmp_path / "out", dynamic_batch=True)
    with open_bundle(bundle) as reader:
        reader.extract(tmp_path / "state" / "models" / "mlp" / "1")
    observer = Observed()
    overrides = {"mlp": ModelOverrides(backend="onnxruntime", instances=1, max_queue_size=1,
                                       max_queue_delay_us=0)}
    dp = DataPlane(tmp_path / "state", observer=observer, overrides=overrides,
                   caller_runs=False)
    try:
        yield dp, observer
    finally:
        dp.close()


def test_invalid_inputs_and_a_full_queue_are_failed_requests(
        plane: tuple[DataPlane, Observed]) -> None:
    dp, observer = plane
    for _ in range(8):
        with pytest.raises(InvalidInputError):
            dp.submit(InferRequest("mlp", {"input": np.zeros((1, 3), np.float32)}))
    assert dp.statistics("mlp")[0].fail.count == 8
    assert observer.requests == [False] * 8
    rows = np.zeros((8, 64), np.float32)
    accepted, refused = [], 0
    while not refused and len(accepted) < 100_000:  # until the queue of one is full
        try:
            accepted.append(dp.submit(InferRequest("mlp", {"input": rows})))
        except QueueFullError:
            refused += 1
    for future in accepted:
        assert future.result(120).outputs
    assert refused == 1 and dp.statistics("mlp")[0].fail.count == 9
    # the observer hears of a batch just after its callers
    eventually(lambda: observer.requests.count(True) >= len(accepted), timeout=60,
               interval=0.01, message="the observer never heard of every accepted request")
    assert observer.requests.count(True) == len(accepted)
    assert observer.requests.count(False) == 9
