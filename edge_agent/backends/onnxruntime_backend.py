"""ONNX Runtime backend: CPU everywhere, CUDA / TensorRT execution providers when present.

One InferenceSession serves every instance: ``InferenceSession.run`` is thread-safe, and a
shared session keeps one copy of the weights. Measured with two threads on a busy 2-core machine
(1 intra-op thread each): a session per instance ran a tiny MLP 1.4-2x faster, squeezenet showed
no consistent difference; memory wins.

With several instances and no thread count configured, the cores are split between them
(``intra_op_num_threads = cores // instances``, at least 1): instances run in parallel on their
own cores instead of each spreading one execution over every core. Squeezenet on 2 cores, two
callers on one session: 1 intra-op thread each ran ~8.6 ms CPU per image against ~9.6-11.3 ms
for one caller with 2 threads (docs/performance.md).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np

from edge_agent.backends.base import (
    BackendOptions,
    BackendPlugin,
    Cancellation,
    RunningExecutions,
    artifact_path,
    threads_per_instance,
)
from edge_agent.errors import BackendError, RuntimeMissingError
from packager.bundle.backend_options import OnnxRuntimeOptions
from packager.bundle.manifest import Manifest
from packager.bundle.ort_memory import keep_one_copy

NAME = "onnxruntime"

_DEVICE_PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "gpu": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
}


def _providers(ort: ModuleType, device: str | None) -> list[str]:
    present = set(ort.get_available_providers())
    if device is None:
        auto = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
        return [p for p in auto if p in present]
    wanted = _DEVICE_PROVIDERS.get(device.lower())
    if wanted is None:
        raise BackendError(
            f"onnxruntime device {device!r} is unknown; "
            f"expected one of {sorted(_DEVICE_PROVIDERS)}")
    if wanted[0] not in present:
        raise RuntimeMissingError(
            f"onnxruntime here has no {wanted[0]} (present: {sorted(present)}); "
            f"install onnxruntime-gpu or choose device 'cpu'")
    return [p for p in wanted if p in present]


class OnnxRuntimeBackend:
    """A model version loaded into one shared ``onnxruntime.InferenceSession``."""

    name = NAME
    cancellation = Cancellation.TERMINATE

    def __init__(self, model_dir: Path, manifest: Manifest, options: BackendOptions) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - registry checks first
            raise RuntimeMissingError(f"onnxruntime is not installed: {exc}") from exc
        path = artifact_path(model_dir, manifest, NAME)
        for data in manifest.external_data.get(NAME, ()):  # weights beside the graph
            if not (Path(model_dir) / data).is_file():
                raise BackendError(f"onnxruntime artifact {path} of model {manifest.name!r} "
                                   f"keeps its weights in {data}, which is missing")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        threads = threads_per_instance(options.threads or manifest.batching.threads,
                                       max(1, options.instances))
        if threads > 0:
            so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        if options.budgeted:  # one copy of the weights, none kept by the arena (measured)
            keep_one_copy(so, ort)
        # Intra-op threads do not spin-wait by default: in the agent they share the cores with
        # the gRPC threads, and spinning cost CPU the server needed (benchmarks/bench_serve.py,
        # docs/performance.md). A bundle may turn spinning back on with
        # backend_options.onnxruntime.allow_spinning = true.
        if not OnnxRuntimeOptions.of(manifest).allow_spinning:
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            so.add_session_config_entry("session.inter_op.allow_spinning", "0")
        providers = _providers(ort, options.device)
        try:
            self._session = ort.InferenceSession(str(path), sess_options=so, providers=providers)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise BackendError(
                f"onnxruntime could not load {path} for model {manifest.name!r}: {exc}") from exc
        session_inputs = {i.name for i in self._session.get_inputs()}
        session_outputs = {o.name for o in self._session.get_outputs()}
        missing = [t.name for t in manifest.inputs if t.name not in session_inputs]
        missing += [t.name for t in manifest.outputs if t.name not in session_outputs]
        if missing:
            raise BackendError(
                f"{path} does not have the tensors {missing} that the manifest of "
                f"{manifest.name!r} declares (model has inputs {sorted(session_inputs)}, "
                f"outputs {sorted(session_outputs)})")
        self.inputs = manifest.inputs
        self.outputs = manifest.outputs
        self._output_names = [t.name for t in manifest.outputs]
        self.device = self._session.get_providers()[0]
        self._run = self._session.run
        # one RunOptions per instance; cancel() sets its terminate flag to stop one execution
        instances = max(1, options.instances)
        self._new_run_options = ort.RunOptions
        self._run_options = [ort.RunOptions() for _ in range(instances)]
        self._executions = RunningExecutions(instances)

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        """Run the shared session (thread-safe) with ``instance``'s RunOptions."""
        run_options = self._run_options[instance]
        executions = self._executions
        executions.begin(instance, execution)
        try:
            results = self._run(self._output_names, inputs, run_options)
        except Exception as exc:
            if executions.end(instance):
                self._run_options[instance] = self._new_run_options()
                raise BackendError(f"onnxruntime inference on instance {instance} was "
                                   "cancelled") from exc
            raise BackendError(f"onnxruntime inference failed: {exc}") from exc
        if executions.end(instance):  # cancelled as it finished: the flag stays set
            self._run_options[instance] = self._new_run_options()
        return dict(zip(self._output_names, results, strict=True))

    def cancel(self, instance: int, execution: int) -> bool:
        """Stop ``execution`` if it runs on ``instance`` now (from another thread): it raises."""
        return self._executions.cancel(instance, execution,
                                       lambda: setattr(self._run_options[instance],
                                                       "terminate", True))

    def close(self) -> None:
        self._session = None
        self._run = None


def load(model_dir: Path, manifest: Manifest, options: BackendOptions) -> OnnxRuntimeBackend:
    """Load ``manifest``'s ONNX artifact from ``model_dir``."""
    return OnnxRuntimeBackend(model_dir, manifest, options)


PLUGIN = BackendPlugin(load=load, runtime_modules=("onnxruntime",),
                       cancellation=Cancellation.TERMINATE)
"""The entry point ``edge_agent.backends: onnxruntime``."""
