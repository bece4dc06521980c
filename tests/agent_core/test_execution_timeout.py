"""The execution watchdog on a real model whose run time the test chooses (tests/agent_core/
spin_model.py): every execution has an identity that cancel must match, so a cancel can never
stop the next execution on an instance; every caller gets exactly one answer; and the timeout
message says what really happened to the run (cancelled, process killed, or still running)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from edge_agent.backends import Backend, BackendOptions, Cancellation, load_backend
from edge_agent.core.batcher import DynamicBatcher
from edge_agent.core.repository import load_manifest
from edge_agent.errors import BackendError, RequestTimeoutError
from packager.bundle.manifest import BatchingConfig
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install
from tests.support.eventually import eventually
from tests.support.spin_model import spin_input

CALM = {"input": spin_input()}


@pytest.fixture(scope="module")
def spin_dir(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(bundles.spin, tmp_path_factory.mktemp("spin"))


def _load(spin_dir: Path, backend: str, isolation: str = "thread") -> Backend:
    return load_backend(spin_dir, load_manifest(spin_dir), BackendOptions(instances=1),
                        preferred=backend, isolation=isolation)


@pytest.fixture(scope="module")
def ort(spin_dir: Path) -> Iterator[Backend]:
    backend = _load(spin_dir, "onnxruntime")
    try:
        yield backend
    finally:
        backend.close()


def _seconds_per_trip(backend: Backend) -> float:
    """What one Loop trip costs on ``backend`` here (the fastest of three timed runs)."""
    trips = 20_000
    backend.infer({"input": spin_input(trips)})
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        backend.infer({"input": spin_input(trips)})
        best = min(best, time.perf_counter() - t0)
    return best / trips


def _batcher(backend: Backend, timeout_s: float) -> DynamicBatcher:
    config = BatchingConfig(max_batch_size=1, instances=1, max_queue_size=1000)
    return DynamicBatcher(backend, model="spin", version=1, config=config,
                          execution_timeout_s=timeout_s)


def test_a_cancel_stops_only_the_execution_it_names(ort: Backend) -> None:
    assert ort.cancellation is Cancellation.TERMINATE
    assert not ort.cancel(0, 1)  # nothing runs
    ort.infer(CALM, 0, 2)
    assert not ort.cancel(0, 2)  # it finished: a late cancel must not stop the next run
    assert ort.infer(CALM, 0, 3)["probs"].shape == (1, 10)
    with ThreadPoolExecutor(1) as pool:
        long_run = pool.submit(ort.infer, {"input": spin_input(10**9)}, 0, 4)
        assert not ort.cancel(0, 3)
        # cancel answers False until the run has begun
        eventually(lambda: ort.cancel(0, 4), message="the run never became cancellable")
        with pytest.raises(BackendError, match="cancelled"):
            long_run.result(60)
    assert ort.infer(CALM, 0, 5)["probs"].shape == (1, 10)


@pytest.mark.slow
@pytest.mark.parametrize(("isolation", "timeout_s", "rounds"), [
    ("thread", 0.02, 200),  # RunOptions.terminate
    ("process", 0.05, 50),  # the runtime process is killed (and reloaded: fewer rounds)
])
def test_runs_ending_right_at_the_timeout_never_cancel_an_innocent_execution(
        spin_dir: Path, isolation: str, timeout_s: float, rounds: int) -> None:
    """A slow run whose length straddles the timeout, then two instant ones on the same
    instance, many times. Each caller gets one answer: its result, or the watchdog's timeout
    when its own run was past the limit (on a busy machine an instant run can be too). A run
    stopped by a cancel meant for another execution would fail with the backend's error."""
    backend = _load(spin_dir, "onnxruntime", isolation)
    per_trip = _seconds_per_trip(backend)
    rng = np.random.default_rng(3)
    batcher = _batcher(backend, timeout_s)
    timed_out = 0
    try:
        for _ in range(rounds):
            trips = int(timeout_s * rng.uniform(0.8, 1.5) / per_trip)
            futures = [batcher.submit({"input": spin_input(trips)}, 1)]
            futures += [batcher.submit(CALM, 1) for _ in range(2)]
            for future in futures:
                try:
                    assert future.result(60).outputs["probs"].shape == (1, 10)
                except RequestTimeoutError:
                    timed_out += 1
    finally:
        assert batcher.close(60)
        backend.close()
    stats = batcher.stats
    assert timed_out > 0  # the watchdog did step in, at the end of some runs
    assert (stats.success.count, stats.fail.count) == (3 * rounds - timed_out, timed_out)


def test_a_caller_running_inline_gets_one_answer_when_its_run_times_out(ort: Backend) -> None:
    batcher = _batcher(ort, 0.1)
    try:
        for _ in range(3):
            future = batcher.submit({"input": spin_input(10**9)}, 1, caller_runs=True)
            assert future.done()  # ran on this thread
            with pytest.raises(RequestTimeoutError, match=r"execution timeout of 0\.1 s"):
                future.result()
            assert batcher.submit(CALM, 1, caller_runs=True).result().outputs["probs"].shape \
                == (1, 10)
    finally:
        assert batcher.close(60)
    assert (batcher.stats.success.count, batcher.stats.fail.count) == (3, 3)


@pytest.mark.parametrize(("backend", "isolation", "says"), [
    ("onnxruntime", "thread", "the run was cancelled and instance 0 serves the next request"),
    ("onnxruntime", "process",
     "the runtime process of instance 0 was killed and a new one replaces it"),
    ("openvino", "thread", "the openvino backend cannot cancel a running inference, so "
                           "instance 0 stays busy until it finishes"),
])
def test_the_timeout_message_says_what_happened_to_the_run(
        spin_dir: Path, backend: str, isolation: str, says: str) -> None:
    loaded = _load(spin_dir, backend, isolation)
    # the uncancellable run must end by itself: about a second
    trips = int(1.0 / _seconds_per_trip(loaded)) if isolation == "thread" else 10**9
    batcher = _batcher(loaded, 0.1)
    try:
        with pytest.raises(RequestTimeoutError) as err:
            batcher.submit({"input": spin_input(trips)}, 1).result(60)
        message = str(err.value)
        assert "'spin' version 1" in message and "execution timeout of 0.1 s" in message
        assert says in message, message
        # the instance serves again: once the uncancellable run has finished, or the killed
        # process's replacement has loaded (which does not count against this one's timeout)
        assert batcher.submit(CALM, 1).result(60).outputs["probs"].shape == (1, 10)
    finally:
        batcher.close(60)
        loaded.close()
