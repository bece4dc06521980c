"""Merge/split, batch formation and the observer hook of the dynamic batcher."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.backends import BackendOptions, load_backend
from edge_agent.core.batcher import _FLOOR_WINDOW, DynamicBatcher
from edge_agent.core.batching import merge_inputs, split_outputs
from edge_agent.core.repository import load_manifest
from edge_agent.errors import ModelUnavailableError
from packager.bundle.manifest import BatchingConfig
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install, reference_outputs


def test_merge_concatenates_in_order_and_split_returns_each_callers_rows() -> None:
    a = {"x": np.arange(6).reshape(2, 3), "y": np.array([[1], [2]])}
    b = {"x": np.arange(6, 9).reshape(1, 3), "y": np.array([[3]])}
    merged = merge_inputs([a, b], ["x", "y"])
    np.testing.assert_array_equal(merged["x"], np.arange(9).reshape(3, 3))
    np.testing.assert_array_equal(merged["y"], [[1], [2], [3]])
    parts = split_outputs({"z": merged["x"] * 10}, [2, 1])
    np.testing.assert_array_equal(parts[0]["z"], a["x"] * 10)
    np.testing.assert_array_equal(parts[1]["z"], b["x"] * 10)
    assert merge_inputs([a], ["x", "y"]) is a  # one request: no copy


class GatedBackend:
    """The real backend, whose first execution waits for ``release`` (``entered`` tells
    that it holds its instance)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.name, self.inputs, self.outputs = backend.name, backend.inputs, backend.outputs
        self.device, self.cancellation = backend.device, backend.cancellation
        self.entered = threading.Event()
        self.release = threading.Event()

    def infer(self, inputs, instance=0, execution=0):
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(60)
        return self.backend.infer(inputs, instance, execution)

    def cancel(self, instance: int, execution: int) -> bool:
        return self.backend.cancel(instance, execution)

    def close(self) -> None:
        pass


class CountingObserver:
    """A real in-memory InferenceObserver that keeps every call."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[str, int, bool, int]] = []
        self.batches: list[tuple[str, int, int]] = []

    def record_request(self, model: str, version: int, *, ok: bool, rows: int, queue_ns: int,
                       compute_ns: int, total_ns: int) -> None:
        assert queue_ns >= 0 and compute_ns >= 0 and total_ns >= queue_ns
        with self.lock:
            self.requests.append((model, version, ok, rows))

    def record_batch(self, model: str, version: int, batch_size: int, compute_ns: int) -> None:
        with self.lock:
            self.batches.append((model, version, batch_size))


@pytest.fixture(scope="module")
def mlp(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    d: Path = install(bundles.mlp_v1, tmp_path_factory.mktemp("batching"))
    manifest = load_manifest(d)
    # two instance slots: the tests run batchers of one and of two instances on it
    backend = load_backend(d, manifest, BackendOptions(instances=2), preferred="onnxruntime")
    try:
        yield backend, bundles.mlp_v1_onnx
    finally:
        backend.close()


def test_batches_form_under_load_and_the_observer_sees_every_request(mlp) -> None:
    backend, onnx_path = mlp
    observer = CountingObserver()
    config = BatchingConfig(max_batch_size=8, preferred_batch_sizes=(8,),
                            max_queue_delay_us=2000, instances=1, max_queue_size=1000)
    gate = GatedBackend(backend)  # the first execution holds the instance: the rest queue
    batcher = DynamicBatcher(gate, model="mlp", version=1, config=config, observer=observer)
    xs = [np.random.default_rng(i).standard_normal((1 + i % 3, 64)).astype(np.float32)
          for i in range(60)]
    refs = reference_outputs(onnx_path, {"input": np.concatenate(xs)})["probs"]
    try:
        futures = [batcher.submit({"input": xs[0]}, len(xs[0]), request_id="0")]
        assert gate.entered.wait(60)
        futures += [batcher.submit({"input": x}, len(x), request_id=str(i))
                    for i, x in enumerate(xs) if i]
        gate.release.set()
        start = 0
        for i, (x, fut) in enumerate(zip(xs, futures, strict=True)):
            result = fut.result(60)
            assert result.id == str(i) and result.version == 1
            np.testing.assert_allclose(result.outputs["probs"], refs[start:start + len(x)],
                                       rtol=1e-4, atol=1e-5)
            start += len(x)
    finally:
        assert batcher.close(30)
    stats = batcher.stats
    assert stats.inference_count == sum(len(x) for x in xs)
    assert stats.success.count == 60 and stats.fail.count == 0
    assert all(size <= 8 for size in stats.batch_stats)
    # 59 requests of 1-3 rows queued behind the first: batches of up to 8 rows formed
    assert stats.execution_count < 60 and max(stats.batch_stats) > 3
    assert len(observer.requests) == 60 and all(ok for _, _, ok, _ in observer.requests)
    assert sum(rows for *_, rows in observer.requests) == stats.inference_count
    assert sum(size for *_, size in observer.batches) == stats.inference_count
    assert len(observer.batches) == stats.execution_count


def test_single_caller_runs_inline_without_waiting_for_the_queue_delay(mlp) -> None:
    backend, _ = mlp
    config = BatchingConfig(max_batch_size=8, max_queue_delay_us=10_000_000, instances=1,
                            max_queue_size=10)
    batcher = DynamicBatcher(backend, model="mlp", version=1, config=config)
    try:
        x = np.zeros((2, 64), np.float32)
        fut = batcher.submit({"input": x}, 2, caller_runs=True)
        assert fut.done()  # ran on this thread: an idle instance and an empty queue
        # through a worker, a lone request does not wait the 10 s delay either
        assert batcher.submit({"input": x}, 2).result(5).outputs["probs"].shape == (2, 10)
    finally:
        batcher.close(5)
    with pytest.raises(ModelUnavailableError, match="unloading"):
        batcher.submit({"input": x}, 2)


def test_blocking_infer_runs_inline_and_queues_when_busy(mlp) -> None:
    backend, onnx_path = mlp
    config = BatchingConfig(max_batch_size=8, instances=1, max_queue_size=100)
    batcher = DynamicBatcher(backend, model="mlp", version=1, config=config)
    xs = [np.random.default_rng(i).standard_normal((2, 64)).astype(np.float32) for i in range(8)]
    refs = [reference_outputs(onnx_path, {"input": x})["probs"] for x in xs]
    bad: list[int] = []
    try:
        result = batcher.infer({"input": xs[0]}, 2, request_id="a", outputs=["probs"])
        assert result.id == "a" and list(result.outputs) == ["probs"]
        np.testing.assert_allclose(result.outputs["probs"], refs[0], rtol=1e-4, atol=1e-5)

        def call(i: int) -> None:
            for _ in range(50):
                out = batcher.infer({"input": xs[i]}, 2, wait_s=60).outputs["probs"]
                if not np.allclose(out, refs[i], rtol=1e-4, atol=1e-5):
                    bad.append(i)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        batcher.close(30)
    assert not bad
    assert batcher.stats.success.count == 1 + 8 * 50
    assert batcher.inflight == 0


def test_two_instances_waiting_for_rows_at_once_never_lose_a_request(mlp) -> None:
    backend, onnx_path = mlp
    config = BatchingConfig(max_batch_size=8, preferred_batch_sizes=(8,), instances=2,
                            max_queue_delay_us=3000, max_queue_size=1000)
    # parallel_min_ns=0: both instances run even for this tiny model
    batcher = DynamicBatcher(backend, model="mlp", version=1, config=config, parallel_min_ns=0)
    xs = [np.random.default_rng(i).standard_normal((1, 64)).astype(np.float32) for i in range(16)]
    refs = [reference_outputs(onnx_path, {"input": x})["probs"] for x in xs]
    bad: list[int] = []

    def call(i: int) -> None:
        for _ in range(40):
            out = batcher.submit({"input": xs[i]}, 1).result(60).outputs["probs"]
            if not np.allclose(out, refs[i], rtol=1e-4, atol=1e-5):
                bad.append(i)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert batcher.close(30)  # nothing left in flight
    assert not bad and batcher.stats.success.count == 16 * 40
    assert max(batcher.stats.batch_stats) > 1


class ConcurrencyProbe:
    """The real backend, counting how many executions run at the same time."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.name, self.inputs, self.outputs = backend.name, backend.inputs, backend.outputs
        self.device, self.cancellation = backend.device, backend.cancellation
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def infer(self, inputs, instance=0, execution=0):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return self.backend.infer(inputs, instance, execution)
        finally:
            with self.lock:
                self.running -= 1

    def cancel(self, instance: int, execution: int) -> bool:
        return self.backend.cancel(instance, execution)

    def close(self) -> None:
        pass


def test_a_tiny_model_runs_one_execution_at_a_time_on_several_instances(mlp) -> None:
    backend, _ = mlp
    probe = ConcurrencyProbe(backend)
    config = BatchingConfig(max_batch_size=8, instances=2, max_queue_size=1000)
    batcher = DynamicBatcher(probe, model="mlp", version=1, config=config)
    x = np.ones((1, 64), np.float32)
    # one window of executions measures the model: its fastest one, not a slow first one on a
    # busy machine, decides whether a second instance may run
    for _ in range(_FLOOR_WINDOW):
        batcher.submit({"input": x}, 1).result(60)
    probe.most = 0

    def call() -> None:
        for _ in range(200):
            batcher.submit({"input": x}, 1).result(60)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert batcher.close(30)
    assert batcher.stats.success.count == _FLOOR_WINDOW + 8 * 200
    assert probe.most == 1  # the MLP's executions take far less than PARALLEL_MIN_NS


class FailingObserver(CountingObserver):
    """A real observer whose batch hook breaks, as a buggy metrics store might."""

    def record_batch(self, model: str, version: int, batch_size: int, compute_ns: int) -> None:
        raise RuntimeError("metrics store is broken")


def test_cancelled_futures_and_a_broken_observer_do_not_stop_the_workers(mlp) -> None:
    backend, _ = mlp
    config = BatchingConfig(max_batch_size=8, instances=1, max_queue_size=1000)
    batcher = DynamicBatcher(backend, model="mlp", version=1, config=config,
                             observer=FailingObserver())
    x = np.zeros((1, 64), np.float32)
    try:
        futures = [batcher.submit({"input": x}, 1) for _ in range(200)]
        cancelled = sum(f.cancel() for f in futures[::2])
        for f in futures[1::2]:
            assert f.result(60).outputs["probs"].shape == (1, 10)
        # the workers are still alive and serving
        assert batcher.submit({"input": x}, 1).result(60).outputs["probs"].shape == (1, 10)
    finally:
        assert batcher.close(30)
    assert batcher.stats.success.count + cancelled >= 101

