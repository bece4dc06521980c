"""Backends and the registry on real bundles: parity, fallback, compile settings, instances."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from edge_agent.backends import (
    BackendOptions,
    Cancellation,
    available_backends,
    backend_available,
    backend_names,
    choose_backend,
    load_backend,
    runtime_process,
)
from edge_agent.backends.base import threads_per_instance
from edge_agent.backends.isolated import load_request
from edge_agent.backends.openvino_backend import compile_config
from edge_agent.backends.registry import get_plugin
from edge_agent.core.repository import load_manifest
from edge_agent.errors import BackendError, RuntimeMissingError
from packager.bundle.backend_options import OpenVinoOptions
from packager.bundle.manifest import Manifest
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install, reference_outputs


@pytest.fixture(scope="module")
def mlp_dir(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(bundles.mlp_v1, tmp_path_factory.mktemp("backends"))


@pytest.fixture(scope="module")
def squeezenet_dir(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(bundles.squeezenet, tmp_path_factory.mktemp("backends-sq"))


def test_runtimes_installed_here_are_detected() -> None:
    assert {"onnxruntime", "openvino"} <= set(available_backends())
    assert not backend_available("no-such-backend")


def test_the_registry_holds_the_entry_points_and_names_an_unknown_backend(
        mlp_dir: Path) -> None:
    group = importlib.metadata.entry_points(group="edge_agent.backends")
    assert set(backend_names()) == {ep.name for ep in group} >= {
        "onnxruntime", "openvino", "tensorrt"}
    assert get_plugin("onnxruntime").cancellation is Cancellation.TERMINATE
    assert get_plugin("openvino").cancellation is Cancellation.NONE
    assert get_plugin("tensorrt").runtime_modules == ("tensorrt", "pycuda")
    unknown = (r"backend .nosuch. is unknown: .*register onnxruntime, openvino, pipeline, python, "
               r"tensorrt")
    with pytest.raises(BackendError, match=unknown):
        get_plugin("nosuch")
    with pytest.raises(BackendError, match=unknown):  # e.g. a typo in the agent config
        load_backend(mlp_dir, load_manifest(mlp_dir), BackendOptions(), preferred="nosuch")


_PLUGIN_MODULE = """
import numpy as np
from edge_agent.backends.base import BackendPlugin, Cancellation

class Doubler:
    name, device, cancellation = "doubler", "CPU", Cancellation.NONE

    def __init__(self, model_dir, manifest, options):
        self.inputs, self.outputs = manifest.inputs, manifest.outputs

    def infer(self, inputs, instance=0, execution=0):
        return {self.outputs[0].name: inputs[self.inputs[0].name][:, :10] * 2}

    def cancel(self, instance, execution):
        return False

    def close(self):
        pass

PLUGIN = BackendPlugin(load=Doubler, runtime_modules=("numpy",),
                       cancellation=Cancellation.NONE)
"""

_USE_IT = """
import sys, numpy as np
from pathlib import Path
from edge_agent.backends import BackendOptions, backend_names, load_backend
from edge_agent.core.repository import load_manifest
model_dir = Path(sys.argv[1])
backend = load_backend(model_dir, load_manifest(model_dir), BackendOptions(), "doubler")
out = backend.infer({"input": np.ones((2, 64), np.float32)})["probs"]
print(backend_names(), backend.name, out.shape, float(out[0, 0]))
print(sorted(m for m in ("openvino", "onnxruntime", "tensorrt") if m in sys.modules))
"""


def test_a_new_backend_is_one_module_and_one_entry_point(mlp_dir: Path, tmp_path: Path) -> None:
    """A third-party backend, installed as a distribution with one entry point, is found
    and serves; no runtime of the built-in backends is imported on the way."""
    (tmp_path / "doubler_backend.py").write_text(_PLUGIN_MODULE)
    info = tmp_path / "doubler_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: doubler-backend\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[edge_agent.backends]\n"
                                           "doubler = doubler_backend:PLUGIN\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    run = subprocess.run([sys.executable, "-c", _USE_IT, str(mlp_dir)], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    names, imported = run.stdout.splitlines()
    assert names == ("('doubler', 'onnxruntime', 'openvino', 'pipeline', 'python', 'tensorrt') "
                     "doubler (2, 10) 2.0")
    assert imported == "[]"


def test_primary_backend_is_chosen_and_fallback_used_when_runtime_missing(
        mlp_dir: Path) -> None:
    manifest = load_manifest(mlp_dir)
    assert manifest.backend == "openvino" and choose_backend(manifest) == "openvino"
    assert choose_backend(manifest, preferred="onnxruntime") == "onnxruntime"
    trt = dataclasses.replace(manifest, backend="tensorrt", fallback_backend="onnxruntime")
    if not backend_available("tensorrt"):
        assert choose_backend(trt) == "onnxruntime"
        backend = load_backend(mlp_dir, trt, BackendOptions())
        try:
            assert backend.name == "onnxruntime"
        finally:
            backend.close()
    alone = dataclasses.replace(manifest, backend="tensorrt", fallback_backend=None)
    if not backend_available("tensorrt"):
        with pytest.raises(RuntimeMissingError, match=r"'tensorrt'.*installed: onnxruntime"):
            choose_backend(alone)
        with pytest.raises(RuntimeMissingError, match="tensorrt: runtime not installed"):
            load_backend(mlp_dir, alone, BackendOptions())


def test_missing_artifact_is_named(mlp_dir: Path) -> None:
    manifest = load_manifest(mlp_dir)
    no_ov = dataclasses.replace(manifest, artifacts={"onnxruntime": manifest.artifacts[
        "onnxruntime"]})
    with pytest.raises(BackendError, match="has no 'openvino' artifact"):
        load_backend(mlp_dir, no_ov, BackendOptions())


@pytest.fixture(scope="module", params=["onnxruntime", "openvino"])
def backend_and_manifest(request: pytest.FixtureRequest, mlp_dir: Path
                         ) -> Iterator[tuple[object, Manifest]]:
    manifest = load_manifest(mlp_dir)
    backend = load_backend(mlp_dir, manifest, BackendOptions(instances=2, threads=1),
                           preferred=request.param)
    try:
        yield backend, manifest
    finally:
        backend.close()


def test_direct_inference_matches_the_source(backend_and_manifest, bundles: Bundles) -> None:
    backend, manifest = backend_and_manifest
    assert backend.inputs == manifest.inputs and backend.outputs == manifest.outputs
    x = np.random.default_rng(7).standard_normal((6, 64)).astype(np.float32)
    out = backend.infer({"input": x}, 1)
    ref = reference_outputs(bundles.mlp_v1_onnx, {"input": x})
    np.testing.assert_allclose(out["probs"], ref["probs"], rtol=1e-4, atol=1e-5)


def test_instances_run_concurrently_and_keep_results_apart(backend_and_manifest,
                                                           bundles: Bundles) -> None:
    backend, _ = backend_and_manifest
    xs = [np.random.default_rng(i).standard_normal((4, 64)).astype(np.float32) for i in (1, 2)]
    refs = [reference_outputs(bundles.mlp_v1_onnx, {"input": x})["probs"] for x in xs]
    bad: list[int] = []

    def run(i: int) -> None:
        for _ in range(200):
            out = backend.infer({"input": xs[i]}, i)["probs"]
            if not np.allclose(out, refs[i], rtol=1e-4, atol=1e-5):
                bad.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not bad


def test_outputs_are_not_overwritten_by_the_next_execution(backend_and_manifest) -> None:
    backend, _ = backend_and_manifest
    a = np.full((2, 64), 0.5, np.float32)
    first = backend.infer({"input": a}, 0)["probs"].copy()
    kept = backend.infer({"input": a}, 0)["probs"]
    backend.infer({"input": np.full((2, 64), -3.0, np.float32)}, 0)
    np.testing.assert_array_equal(kept, first)


def test_squeezenet_on_both_backends_matches_the_source(squeezenet_dir: Path,
                                                        bundles: Bundles) -> None:
    manifest = load_manifest(squeezenet_dir)
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    ref = reference_outputs(bundles.squeezenet_onnx, {"data_0": x})["softmaxout_1"]
    for name in ("onnxruntime", "openvino"):
        backend = load_backend(squeezenet_dir, manifest, BackendOptions(), preferred=name)
        try:
            out = backend.infer({"data_0": np.repeat(x, 3, axis=0)})["softmaxout_1"]
            assert out.shape == (3, 1000, 1, 1)
            for row in range(3):
                np.testing.assert_allclose(out[row:row + 1], ref, rtol=1e-3, atol=1e-5)
        finally:
            backend.close()


def test_openvino_compile_settings_follow_the_manifest_and_instances(mlp_dir: Path) -> None:
    assert compile_config("CPU", 1, 0) == {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
                                           "ENABLE_CPU_PINNING": "NO"}
    assert compile_config("CPU", 3, 2) == {"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": "3",
                                           "INFERENCE_NUM_THREADS": "2",
                                           "ENABLE_CPU_PINNING": "NO"}
    bundle_options = OpenVinoOptions(performance_hint="THROUGHPUT", inference_precision="f32")
    assert compile_config("CPU", 1, 1, bundle_options) == {
        "PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": "1", "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": "1", "ENABLE_CPU_PINNING": "NO"}
    pinned = OpenVinoOptions(enable_cpu_pinning=True)
    assert compile_config("CPU", 1, 1, pinned)["ENABLE_CPU_PINNING"] == "YES"
    assert "NUM_STREAMS" not in compile_config("AUTO", 2, 0, bundle_options)
    assert "ENABLE_CPU_PINNING" not in compile_config("AUTO", 2, 0)
    manifest = load_manifest(mlp_dir)
    # The bundle's inference precision (what parity was checked at) is what the device uses.
    assert manifest.backend_options["openvino"]["inference_precision"] == "f32"
    assert compile_config("CPU", 1, 0, OpenVinoOptions.of(manifest))[
        "INFERENCE_PRECISION_HINT"] == "f32"
    backend = load_backend(mlp_dir, manifest, BackendOptions(instances=2), preferred="openvino")
    try:
        assert backend.device == "CPU"
        compiled = backend._compiled
        assert str(compiled.get_property("PERFORMANCE_HINT")) == "THROUGHPUT"
        assert int(compiled.get_property("NUM_STREAMS")) == 2
        assert compiled.get_property("ENABLE_CPU_PINNING") is False
    finally:
        backend.close()
    with pytest.raises(RuntimeMissingError, match="'GPU' is not present"):
        load_backend(mlp_dir, manifest, BackendOptions(device="GPU"), preferred="openvino")


def test_openvino_compiles_with_the_bundles_settings_in_and_out_of_process(
        mlp_dir: Path) -> None:
    """The manifest's performance hint and inference precision reach the compiled model, in
    the agent's process and in a runtime process alike; the model has ``num_streams`` streams
    in all: one compiled model with one per instance, or one per instance's process."""
    manifest = load_manifest(mlp_dir)
    bundle = manifest.backend_options["openvino"]
    assert (bundle["performance_hint"], bundle["inference_precision"]) == ("THROUGHPUT", "f32")
    streams = int(bundle["num_streams"])
    options = BackendOptions(instances=streams)
    in_process = load_backend(mlp_dir, manifest, options, preferred="openvino")
    # what a runtime process loads, from the message the isolated backend sends it
    one_instance = runtime_process.load(load_request(mlp_dir, manifest, options, "openvino"))
    try:
        for backend, compiled_streams in ((in_process, streams), (one_instance, 1)):
            compiled = backend._compiled
            assert str(compiled.get_property("PERFORMANCE_HINT")) == bundle["performance_hint"]
            assert compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
            assert int(compiled.get_property("NUM_STREAMS")) == compiled_streams
    finally:
        in_process.close()
        one_instance.close()


def test_read_only_and_strided_inputs_are_accepted(backend_and_manifest, bundles: Bundles) -> None:
    """Arrays decoded from protobuf bytes are read-only views; slices are not contiguous."""
    backend, _ = backend_and_manifest
    x = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    ref = reference_outputs(bundles.mlp_v1_onnx, {"input": x})["probs"]
    read_only = np.frombuffer(x.tobytes(), dtype=np.float32).reshape(3, 64)
    assert not read_only.flags.writeable
    np.testing.assert_allclose(backend.infer({"input": read_only}, 0)["probs"], ref,
                               rtol=1e-4, atol=1e-5)
    wide = np.zeros((3, 128), np.float32)
    wide[:, ::2] = x
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_allclose(backend.infer({"input": strided}, 0)["probs"], ref,
                               rtol=1e-4, atol=1e-5)


def test_onnxruntime_threads_do_not_spin_unless_the_bundle_asks(mlp_dir: Path) -> None:
    """Spinning intra-op threads took CPU from the gRPC threads on 2 cores (docs/performance.md)."""
    manifest = load_manifest(mlp_dir)

    def spinning(m: Manifest) -> str | None:
        backend = load_backend(mlp_dir, m, BackendOptions(), preferred="onnxruntime")
        try:
            so = backend._session.get_session_options()
            try:
                return so.get_session_config_entry("session.intra_op.allow_spinning")
            except Exception:  # not set: ONNX Runtime's default (spinning)
                return None
        finally:
            backend.close()

    assert spinning(manifest) == "0"
    opts = {**manifest.backend_options,
            "onnxruntime": {**manifest.backend_options.get("onnxruntime", {}),
                            "allow_spinning": True}}
    assert spinning(dataclasses.replace(manifest, backend_options=opts)) in (None, "1")


def test_onnxruntime_splits_the_cores_between_instances(mlp_dir: Path) -> None:
    """Several instances without a thread count: one share of the cores each, so instances run
    side by side instead of each spreading one execution over every core."""
    cores = len(os.sched_getaffinity(0))
    assert threads_per_instance(3, 2) == 3  # configured: kept
    assert threads_per_instance(0, 1) == 0  # one instance: ONNX Runtime's default
    assert threads_per_instance(0, 2) == max(1, cores // 2)
    assert threads_per_instance(0, 4 * cores) == 1
    manifest = load_manifest(mlp_dir)
    for options, expected in ((BackendOptions(instances=2), max(1, cores // 2)),
                              (BackendOptions(instances=2, threads=3), 3)):
        backend = load_backend(mlp_dir, manifest, options, preferred="onnxruntime")
        try:
            assert backend._session.get_session_options().intra_op_num_threads == expected
            feed = {"input": np.ones((2, 64), np.float32)}
            with ThreadPoolExecutor(2) as pool:
                a, b = pool.map(backend.infer, [feed, feed], range(2))
            assert np.array_equal(a["probs"], b["probs"])
        finally:
            backend.close()
