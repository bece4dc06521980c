"""The data plane end to end on real bundles, real ONNX Runtime and real OpenVINO."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.errors import (
    InvalidInputError,
    ModelNotFoundError,
    ModelUnavailableError,
    QueueFullError,
    RequestTimeoutError,
)
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install, reference_outputs

BACKENDS = ("onnxruntime", "openvino")


def _rows(n: int, seed: int, features: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, features)).astype(np.float32)


@pytest.fixture(scope="module", params=BACKENDS)
def plane(request: pytest.FixtureRequest, bundles: Bundles,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataPlane]:
    backend = request.param
    state = tmp_path_factory.mktemp(f"state-{backend}")
    for b in (bundles.mlp_v1, bundles.mlp_fixed, bundles.squeezenet):
        install(b, state)
    dp = DataPlane(state, default_overrides=ModelOverrides(backend=backend))
    try:
        yield dp
    finally:
        dp.close()


def test_models_load_ready_on_the_requested_backend(plane: DataPlane) -> None:
    index = plane.repository_index()
    assert [(e.name, e.version, e.state) for e in index] == [
        ("fixed", 1, "READY"), ("mlp", 1, "READY"), ("squeezenet", 1, "READY")]
    assert plane.ready() and plane.live()
    for name in ("mlp", "fixed", "squeezenet"):
        assert plane.model_ready(name)
        cfg = plane.model_config(name)
        assert cfg.backend in BACKENDS
    backend = plane.model_config("mlp").backend
    assert plane.model_metadata("mlp").platform == {
        "onnxruntime": "onnxruntime_onnx", "openvino": "openvino"}[backend]


def test_mlp_outputs_match_the_source_model(plane: DataPlane, bundles: Bundles) -> None:
    x = _rows(5, seed=11)
    result = plane.infer(InferRequest("mlp", {"input": x}, id="r1"), timeout_s=30)
    ref = reference_outputs(bundles.mlp_v1_onnx, {"input": x})["probs"]
    assert result.model == "mlp" and result.version == 1 and result.id == "r1"
    assert result.outputs["probs"].shape == (5, 10)
    np.testing.assert_allclose(result.outputs["probs"], ref, rtol=1e-4, atol=1e-5)


def test_squeezenet_outputs_match_the_source_model(plane: DataPlane, bundles: Bundles) -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, 224, 224)).astype(np.float32)
    result = plane.infer(InferRequest("squeezenet", {"data_0": x}), timeout_s=60)
    out = result.outputs["softmaxout_1"]
    assert out.shape == (2, 1000, 1, 1)
    for row in range(2):
        ref = reference_outputs(bundles.squeezenet_onnx, {"data_0": x[row:row + 1]})
        np.testing.assert_allclose(out[row:row + 1], ref["softmaxout_1"], rtol=1e-3, atol=1e-5)


def test_unbatched_model_is_served_one_request_per_execution(plane: DataPlane,
                                                             bundles: Bundles) -> None:
    assert plane.model_metadata("fixed").max_batch_size == 0
    x = _rows(1, seed=5)
    result = plane.infer(InferRequest("fixed", {"input": x}), timeout_s=30)
    ref = reference_outputs(bundles.mlp_fixed_onnx, {"input": x})["probs"]
    np.testing.assert_allclose(result.outputs["probs"], ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(InvalidInputError, match="dim 0 must be 1"):
        plane.submit(InferRequest("fixed", {"input": _rows(2, seed=5)}))


def test_concurrent_callers_each_get_their_own_rows_and_batches_form(
        plane: DataPlane, bundles: Bundles) -> None:
    callers, per_caller = 16, 25
    inputs = [[_rows(1 + (i + j) % 3, seed=1000 * i + j) for j in range(per_caller)]
              for i in range(callers)]
    flat = np.concatenate([x for xs in inputs for x in xs])
    ref_all = reference_outputs(bundles.mlp_v1_onnx, {"input": flat})["probs"]
    refs, start = [], 0
    for xs in inputs:
        refs.append([])
        for x in xs:
            refs[-1].append(ref_all[start:start + len(x)])
            start += len(x)
    before = plane.statistics("mlp")[0]
    errors: list[BaseException] = []
    mismatches: list[tuple[int, int]] = []
    barrier = threading.Barrier(callers)

    def caller(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            for j, x in enumerate(inputs[i]):
                out = plane.submit(InferRequest("mlp", {"input": x})).result(60).outputs
                if not np.allclose(out["probs"], refs[i][j], rtol=1e-4, atol=1e-5):
                    mismatches.append((i, j))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not mismatches
    after = plane.statistics("mlp")[0]
    total_rows = sum(len(x) for xs in inputs for x in xs)
    assert after.inference_count - before.inference_count == total_rows
    assert after.success.count - before.success.count == callers * per_caller
    executions = after.execution_count - before.execution_count
    assert executions < callers * per_caller  # some requests shared an execution
    multi = [size for size, bs in after.batch_stats.items()
             if size > 3 and bs.compute_infer.count > before.batch_stats.get(
                 size, type(bs)(size)).compute_infer.count]
    assert multi, f"no batch larger than one request formed: {after.batch_stats}"


def test_requested_outputs_subset_and_statistics(plane: DataPlane) -> None:
    before = plane.statistics("mlp", 1)[0]
    result = plane.infer(InferRequest("mlp", {"input": _rows(3, 9)}, outputs=["probs"]), 30)
    assert list(result.outputs) == ["probs"]
    after = plane.statistics("mlp", 1)[0]
    assert after.success.count == before.success.count + 1
    assert after.inference_count == before.inference_count + 3
    assert after.last_inference_ms > 0 and after.success.ns > before.success.ns
    assert 3 in after.batch_stats or after.execution_count > before.execution_count


@pytest.mark.parametrize(("request_", "error", "pattern"), [
    (InferRequest("nope", {"input": _rows(1, 0)}), ModelNotFoundError, "'nope'"),
    (InferRequest("mlp", {"input": _rows(1, 0)}, version=9), ModelNotFoundError, "version 9"),
    (InferRequest("mlp", {}), InvalidInputError, "no inputs"),
    (InferRequest("mlp", {"input": _rows(1, 0), "extra": _rows(1, 0)}), InvalidInputError,
     r"unknown inputs \['extra'\]"),
    (InferRequest("mlp", {"wrong": _rows(1, 0)}), InvalidInputError, r"missing inputs \['input'\]"),
    (InferRequest("mlp", {"input": _rows(1, 0).astype(np.float64)}), InvalidInputError,
     "'input' has datatype float64 but the model expects FP32"),
    (InferRequest("mlp", {"input": np.zeros((1, 64, 1), np.float32)}), InvalidInputError,
     "'input' has shape .* expects rank 2"),
    (InferRequest("mlp", {"input": np.zeros((1, 63), np.float32)}), InvalidInputError,
     "'input' .* dim 1 must be 64"),
    (InferRequest("mlp", {"input": _rows(9, 0)}), InvalidInputError, "9 rows but max_batch_size"),
    (InferRequest("mlp", {"input": np.zeros((0, 64), np.float32)}), InvalidInputError, "0 rows"),
    (InferRequest("mlp", {"input": _rows(1, 0)}, outputs=["logits"]), InvalidInputError,
     r"requested outputs \['logits'\] are unknown"),
    (InferRequest("mlp", {"input": [[0.0] * 64]}), InvalidInputError, "must be a numpy array"),
])
def test_validation_rejects_bad_requests_synchronously(
        plane: DataPlane, request_: InferRequest, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern) as info:
        plane.submit(request_)
    if error is InvalidInputError:
        assert "model 'mlp' version 1" in str(info.value)


def test_unknown_model_metadata_and_statistics(plane: DataPlane) -> None:
    with pytest.raises(ModelNotFoundError):
        plane.model_metadata("nope")
    with pytest.raises(ModelNotFoundError):
        plane.statistics("nope")
    assert not plane.model_ready("nope")
    assert {s.name for s in plane.statistics()} == {"mlp", "fixed", "squeezenet"}


# --------------------------------------------------------------------------- queueing
@pytest.fixture(scope="module")
def queued_plane(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[DataPlane]:
    """Requests always go through the queue (no caller-runs), one instance, tiny queue."""
    state = tmp_path_factory.mktemp("state-queue")
    install(bundles.squeezenet, state)
    install(bundles.mlp_v1, state)
    overrides = {
        "squeezenet": ModelOverrides(backend="onnxruntime", instances=1, max_queue_size=2,
                                     max_queue_delay_us=0),
        "mlp": ModelOverrides(backend="onnxruntime", instances=1, allow_timeout_override=False,
                              default_timeout_us=0),
    }
    dp = DataPlane(state, overrides=overrides, caller_runs=False)
    try:
        yield dp
    finally:
        dp.close()


def test_full_queue_refuses_synchronously_and_never_grows(queued_plane: DataPlane) -> None:
    big = np.zeros((4, 3, 224, 224), np.float32)
    batcher = queued_plane.repository.resolve("squeezenet").batcher
    accepted = []
    with pytest.raises(QueueFullError, match="'squeezenet' version 1: queue is full"):
        for _ in range(10_000):
            accepted.append(queued_plane.submit(InferRequest("squeezenet", {"data_0": big})))
            assert len(batcher._queue) <= 2
    for fut in accepted:
        assert fut.result(120).outputs["softmaxout_1"].shape == (4, 1000, 1, 1)


def test_queue_timeout_answers_request_timeout(queued_plane: DataPlane) -> None:
    x = np.zeros((1, 3, 224, 224), np.float32)
    before = queued_plane.statistics("squeezenet")[0].fail.count
    fut = queued_plane.submit(InferRequest("squeezenet", {"data_0": x}, timeout_us=1))
    with pytest.raises(RequestTimeoutError, match="past its timeout of 1 us"):
        fut.result(60)
    assert queued_plane.statistics("squeezenet")[0].fail.count == before + 1
    # without a timeout the same request is served
    ok = queued_plane.submit(InferRequest("squeezenet", {"data_0": x})).result(60)
    assert ok.outputs["softmaxout_1"].shape == (1, 1000, 1, 1)


def test_timeout_override_is_ignored_when_the_model_forbids_it(queued_plane: DataPlane) -> None:
    result = queued_plane.submit(
        InferRequest("mlp", {"input": _rows(2, 1)}, timeout_us=1)).result(60)
    assert result.outputs["probs"].shape == (2, 10)


def test_corrupt_artifact_leaves_the_version_unavailable(bundles: Bundles, tmp_path: Path) -> None:
    install(bundles.mlp_v1, tmp_path)
    xml = tmp_path / "models" / "mlp" / "1" / "artifacts" / "openvino" / "model.bin"
    data = bytearray(xml.read_bytes())
    data[100] ^= 0xFF
    xml.write_bytes(bytes(data))
    dp = DataPlane(tmp_path)
    try:
        (entry,) = dp.repository_index()
        assert entry.state == "UNAVAILABLE" and "sha256" in entry.reason
        assert not dp.model_ready("mlp")
        with pytest.raises(ModelUnavailableError, match="sha256"):
            dp.submit(InferRequest("mlp", {"input": _rows(1, 0)}))
        assert dp.repository_index(ready_only=True) == []
    finally:
        dp.close()


def test_blocking_infer_gives_up_with_request_timeout(queued_plane: DataPlane) -> None:
    big = np.zeros((4, 3, 224, 224), np.float32)
    busy = queued_plane.submit(InferRequest("squeezenet", {"data_0": big}))
    # caller_runs is off in this plane, so infer() queues behind the busy instance
    with pytest.raises(RequestTimeoutError, match="no answer within 1e-06 s"):
        queued_plane.infer(InferRequest("squeezenet", {"data_0": big[:1]}), timeout_s=1e-6)
    assert busy.result(120).outputs["softmaxout_1"].shape == (4, 1000, 1, 1)


async def test_asyncio_callers_await_futures_without_running_inline(plane: DataPlane,
                                                                   bundles: Bundles) -> None:
    import asyncio

    xs = [_rows(2, seed=300 + i) for i in range(8)]
    refs = reference_outputs(bundles.mlp_v1_onnx, {"input": np.concatenate(xs)})["probs"]
    futures = [plane.submit(InferRequest("mlp", {"input": x})) for x in xs]
    # from an event-loop thread nothing runs inline, so submit() returned at once
    assert not all(f.done() for f in futures)
    results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    for i, r in enumerate(results):
        np.testing.assert_allclose(r.outputs["probs"], refs[2 * i:2 * i + 2], rtol=1e-4,
                                   atol=1e-5)
