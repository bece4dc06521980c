"""Requests taken up together (``DataPlane.infer_together``, issue 29): the gRPC inference
lane runs the quick calls that are ready at once as one execution. Each request must get
exactly the answer ``infer`` gives it alone, errors in their places, on real ONNX Runtime."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.config.models import ModelOverrides
from edge_agent.core.batcher import Together
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest, InferResult, PolledCaller
from edge_agent.errors import (
    AgentError,
    InvalidInputError,
    ModelNotFoundError,
    ModelUnavailableError,
    RequestCancelledError,
)
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install, reference_outputs
from tests.support.eventually import eventually
from tests.support.spin_model import spin_input

SLOW_TRIPS = 1_000_000  # a run of a second or more, whatever the machine's load


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def plane(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataPlane]:
    state = tmp_path_factory.mktemp("together")
    for b in (bundles.mlp_v1, bundles.mlp_fixed, bundles.spin):
        install(b, state)
    dp = DataPlane(state, overrides={"mlp": ModelOverrides(isolation="thread")})
    try:
        yield dp
    finally:
        dp.close()


def _counts(plane: DataPlane, model: str) -> tuple[int, int]:
    stats = plane.statistics(model)[0]
    return stats.execution_count, stats.inference_count


def _ok(answer: InferResult | AgentError) -> InferResult:
    assert isinstance(answer, InferResult), answer
    return answer


def test_requests_of_one_model_run_as_one_execution_each_answered_with_its_own_rows(
        plane: DataPlane, bundles: Bundles) -> None:
    inputs = [_rows(n, seed) for seed, n in enumerate((1, 3, 1, 2))]
    executions, inferences = _counts(plane, "mlp")
    answers = plane.infer_together(
        [InferRequest("mlp", {"input": x}, id=f"r{i}") for i, x in enumerate(inputs)])
    assert _counts(plane, "mlp") == (executions + 1, inferences + 7)
    for i, (x, answer) in enumerate(zip(inputs, answers, strict=True)):
        result = _ok(answer)
        assert (result.model, result.version, result.id) == ("mlp", 1, f"r{i}")
        np.testing.assert_allclose(
            result.outputs["probs"],
            reference_outputs(bundles.mlp_v1_onnx, {"input": x})["probs"],
            rtol=1e-4, atol=1e-5)


def test_a_bad_request_gets_its_error_in_its_place_and_the_others_their_answers(
        plane: DataPlane) -> None:
    good = _rows(1, 7)
    alone = _ok(plane.infer_together([InferRequest("mlp", {"input": good})])[0])
    gone = PolledCaller(lambda: False)  # its caller left before it ran
    answers = plane.infer_together([
        InferRequest("mlp", {"input": good}),
        InferRequest("mlp", {"input": np.zeros((1, 63), np.float32)}),
        InferRequest("nope", {"input": good}),
        InferRequest("mlp", {"input": good}, caller=gone),
        InferRequest("mlp", {"input": good}),
    ])
    assert [type(a) for a in answers] == [InferResult, InvalidInputError, ModelNotFoundError,
                                          RequestCancelledError, InferResult]
    for i in (0, 4):
        np.testing.assert_array_equal(_ok(answers[i]).outputs["probs"],
                                      alone.outputs["probs"])
    # the errors are returned as they are raised alone, and hold no frame (a caught
    # exception's traceback would keep the requests of the frames that caught it alive)
    for error in answers[1:4]:
        assert isinstance(error, AgentError)
        assert error.__traceback__ is None and error.__context__ is None
    assert "63" in str(answers[1]) and "nope" in str(answers[2])


def test_an_unbatched_model_runs_one_request_an_execution(plane: DataPlane) -> None:
    executions, inferences = _counts(plane, "fixed")
    answers = plane.infer_together(
        [InferRequest("fixed", {"input": _rows(1, seed)}) for seed in range(3)])
    assert all(isinstance(a, InferResult) for a in answers), answers
    assert _counts(plane, "fixed") == (executions + 3, inferences + 3)


def test_requests_for_a_busy_model_wait_their_turn_and_are_all_answered(
        plane: DataPlane) -> None:
    slow: list[InferResult | BaseException] = []

    def run_slow() -> None:
        try:
            slow.append(plane.infer(InferRequest("spin", {"input": spin_input(SLOW_TRIPS)})))
        except BaseException as exc:  # reported by the assertion below
            slow.append(exc)

    thread = threading.Thread(target=run_slow)
    thread.start()
    try:
        eventually(lambda: plane.repository.resolve("spin").batcher.inflight == 1,
                   timeout=60, message="the slow request did not start")
        answers = plane.infer_together(
            [InferRequest("spin", {"input": spin_input()}) for _ in range(3)])
    finally:
        thread.join(120)
    assert [type(a) for a in answers] == [InferResult] * 3, answers
    assert len(slow) == 1 and isinstance(slow[0], InferResult), slow


def test_a_closed_batcher_answers_each_request_unavailable_and_runs_none(
        bundles: Bundles, tmp_path: Path) -> None:
    install(bundles.mlp_v1, tmp_path)
    dp = DataPlane(tmp_path, overrides={"mlp": ModelOverrides(isolation="thread")})
    try:
        batcher = dp.repository.resolve("mlp").batcher
        batcher.close()
        x = _rows(1, 3)
        answers = batcher.infer_together(
            [Together({"input": x}, 1, None, "", 0, 0, None, None) for _ in range(2)])
        assert [type(a) for a in answers] == [ModelUnavailableError] * 2
        assert batcher.snapshot_stats().execution_count == 0
    finally:
        dp.close()
