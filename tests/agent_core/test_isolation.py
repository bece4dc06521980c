"""Process isolation on real runtimes: each instance in a runtime process of its own, killed and
replaced when it hangs (cancel) or crashes (a real signal), gone with its agent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import pytest

from edge_agent.backends.base import BackendOptions, Cancellation
from edge_agent.backends.isolated import IsolatedBackend
from edge_agent.backends.registry import load_backend, runs_in_process
from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.repository import load_manifest
from edge_agent.core.types import InferRequest
from edge_agent.errors import BackendCrashedError, BackendError, ErrorCode
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install, reference_outputs
from tests.support.eventually import eventually
from tests.support.spin_model import spin_input

X = np.random.default_rng(7).standard_normal((3, 64)).astype(np.float32)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(scope="module")
def mlp_dir(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(bundles.mlp_v1, tmp_path_factory.mktemp("iso-state"))


@pytest.fixture
def isolated(mlp_dir: Path) -> Iterator[IsolatedBackend]:
    backend = load_backend(mlp_dir, load_manifest(mlp_dir), BackendOptions(instances=2),
                           isolation="process")
    assert isinstance(backend, IsolatedBackend)
    try:
        yield backend
    finally:
        backend.close()


def test_outputs_equal_the_source_model_and_each_instance_has_its_own_process(
        isolated: IsolatedBackend, bundles: Bundles) -> None:
    assert isolated.name == "openvino"
    pids = isolated.pids
    assert len(set(pids)) == 2 and os.getpid() not in pids
    want = reference_outputs(bundles.mlp_v1_onnx, {"input": X})["probs"]
    for instance in (0, 1):
        got = isolated.infer({"input": X}, instance)["probs"]
        assert got.flags.writeable and got.shape == (3, 10)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_cancel_kills_only_the_execution_it_names_and_a_new_process_replaces_it(
        bundles: Bundles, tmp_path: Path) -> None:
    spin_dir = install(bundles.spin, tmp_path)
    backend = load_backend(spin_dir, load_manifest(spin_dir), BackendOptions(instances=2),
                           preferred="onnxruntime", isolation="process")
    assert isinstance(backend, IsolatedBackend) and backend.cancellation is Cancellation.KILL
    try:
        before = backend.pids
        calm = {"input": spin_input()}
        assert not backend.cancel(0, 1)  # nothing runs: nothing is killed
        backend.infer(calm, 0, 2)
        assert not backend.cancel(0, 2)  # it finished: a late cancel kills nothing
        assert backend.infer(calm, 0, 3)["probs"].shape == (1, 10)
        assert backend.pids == before
        with ThreadPoolExecutor(1) as pool:
            long_run = pool.submit(backend.infer, {"input": spin_input(10**9)}, 0, 4)
            # cancel answers False until the run has begun
            eventually(lambda: backend.cancel(0, 4), message="the run never became cancellable")
            with pytest.raises(BackendError, match="cancelled"):
                long_run.result(60)
        out = backend.infer(calm, 0, 5)["probs"]  # waits for the replacement to load
        assert out.shape == (1, 10)
        after = backend.pids
        assert after[0] not in (0, before[0]) and after[1] == before[1]
        assert _gone(before[0])
    finally:
        backend.close()


def test_a_crashed_runtime_fails_one_execution_as_unavailable_and_is_restarted(
        isolated: IsolatedBackend) -> None:
    victim = isolated.pids[1]
    os.kill(victim, signal.SIGSEGV)
    eventually(lambda: _gone(victim), message="never true: _gone(victim)")
    with pytest.raises(BackendCrashedError) as err:
        isolated.infer({"input": X}, 1)
    assert err.value.code is ErrorCode.UNAVAILABLE
    assert "SIGSEGV" in str(err.value) and "'mlp' version 1" in str(err.value)
    assert isolated.infer({"input": X}, 1)["probs"].shape == (3, 10)
    assert isolated.infer({"input": X}, 0)["probs"].shape == (3, 10)


def test_close_stops_every_runtime_process(mlp_dir: Path) -> None:
    backend = load_backend(mlp_dir, load_manifest(mlp_dir), BackendOptions(instances=2),
                           isolation="process")
    pids = backend.pids
    backend.close()
    backend.close()  # idempotent
    assert all(_gone(p) for p in pids)


def test_a_load_error_in_the_runtime_process_is_raised_with_its_message(
        mlp_dir: Path, tmp_path: Path) -> None:
    manifest = load_manifest(mlp_dir)
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(BackendError, match=r"has no 'tensorrt' artifact|cannot be served"):
        IsolatedBackend(mlp_dir, manifest, BackendOptions(), preferred="tensorrt")
    assert all(_gone(p.pid) for p in psutil.Process().children() if p.pid not in before)


def test_runtime_processes_die_with_a_killed_agent(mlp_dir: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from edge_agent.backends.base import BackendOptions, Cancellation
        from edge_agent.backends.registry import load_backend
        from edge_agent.core.repository import load_manifest
        d = Path({str(mlp_dir)!r})
        b = load_backend(d, load_manifest(d), BackendOptions(), isolation="process")
        print(b.pids[0], flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline())
        assert psutil.pid_exists(child)
        proc.kill()
        proc.wait(timeout=60)
        eventually(lambda: _gone(child), message="never true: _gone(child)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)


def test_auto_isolates_runtimes_that_cannot_cancel(mlp_dir: Path) -> None:
    manifest = load_manifest(mlp_dir)  # an OpenVINO bundle with an ONNX Runtime fallback
    assert runs_in_process("auto", manifest)
    assert not runs_in_process("auto", manifest, preferred="onnxruntime")
    assert runs_in_process("process", manifest, preferred="onnxruntime")
    assert not runs_in_process("thread", manifest)
    with pytest.raises(BackendError, match="isolation 'fork' is unknown"):
        runs_in_process("fork", manifest)


def test_the_data_plane_serves_an_isolated_model_through_batches(
        bundles: Bundles, tmp_path: Path) -> None:
    install(bundles.mlp_v1, tmp_path)
    dp = DataPlane(tmp_path, default_overrides=ModelOverrides(isolation="process",
                                                              backend="onnxruntime"))
    try:
        mv = dp.repository.resolve("mlp")
        assert isinstance(mv.batcher.backend, IsolatedBackend)
        assert mv.backend_name == "onnxruntime"
        want = reference_outputs(bundles.mlp_v1_onnx, {"input": X})["probs"]
        result = dp.infer(InferRequest("mlp", {"input": X}))
        np.testing.assert_allclose(result.outputs["probs"], want, rtol=1e-4, atol=1e-5)
    finally:
        dp.close()
