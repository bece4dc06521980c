"""TensorRT backend: an engine built on the device from the bundle's ONNX model and build spec.

An engine is tied to the TensorRT version and the GPU, so the bundle carries the ONNX model and
``manifest.backend_options["tensorrt"]`` (precision, min/opt/max batch, workspace_mb, and
optionally ``engines``: prebuilt engines keyed by ``<trt version>-<gpu>``). On first load the
engine is built with the TensorRT Python API and cached under
``<state_dir>/engines/<sha256 of (TensorRT version, GPU, ONNX sha256, spec)>.engine``.

Each instance owns an execution context, a CUDA stream and page-locked host / device buffers
sized for ``max_batch``; inputs set their shape per call and run with ``execute_async_v3``.

NOT VERIFIED ON HARDWARE: written against the TensorRT 10 and pycuda APIs on a machine without
TensorRT or an NVIDIA GPU; its tests skip here. TensorRT and pycuda are imported lazily, so this
module imports everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backends.base import BackendOptions, BackendPlugin, Cancellation, artifact_path
from edge_agent.errors import BackendError, RuntimeMissingError
from packager.bundle.backend_options import TensorRtOptions
from packager.bundle.errors import PackagerError
from packager.bundle.format import sha256_file
from packager.bundle.manifest import Manifest
from packager.bundle.tensorrt_engine import (
    SPEC_KEYS,
    TensorRt,
    TensorRtUnavailableError,
    build_engine,
    engine_key,
    load_tensorrt,
)

NAME = "tensorrt"


def build_spec(manifest: Manifest) -> dict[str, Any]:
    """The engine build spec from the manifest, with defaults from its batching config."""
    opts = TensorRtOptions.of(manifest)
    max_b = max(1, opts.max_batch or manifest.batching.max_batch_size or 1)
    return {
        "precision": opts.precision or manifest.precision or "fp16",
        "min_batch": max(1, opts.min_batch or 1),
        "opt_batch": min(max_b, max(1, opts.opt_batch or max_b)),
        "max_batch": max_b,
        "workspace_mb": opts.workspace_mb if opts.workspace_mb is not None else 1024,
    }


def cache_key(trt_version: str, gpu_name: str, onnx_sha256: str, spec: dict[str, Any]) -> str:
    """The engine cache key: sha256 over TensorRT version, GPU name, ONNX hash and spec."""
    blob = json.dumps([trt_version, gpu_name, onnx_sha256, {k: spec[k] for k in SPEC_KEYS}],
                      sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _load_runtime() -> TensorRt:
    try:
        return load_tensorrt()
    except TensorRtUnavailableError as exc:
        raise RuntimeMissingError(f"TensorRT backend: {exc}") from exc


class _Instance:
    """One execution context with its stream and max-batch sized buffers."""

    def __init__(self, trt: Any, cuda: Any, engine: Any, names: list[str], max_batch: int) -> None:
        self.context = engine.create_execution_context()
        self.stream = cuda.Stream()
        self.host: dict[str, np.ndarray] = {}
        self.device: dict[str, Any] = {}
        for name in names:
            shape = [max_batch if d < 0 else int(d) for d in engine.get_tensor_shape(name)]
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            count = int(np.prod(shape)) if shape else 1
            self.host[name] = cuda.pagelocked_empty(count, dtype)
            self.device[name] = cuda.mem_alloc(max(self.host[name].nbytes, 1))
            self.context.set_tensor_address(name, int(self.device[name]))


class TensorRtBackend:
    """A TensorRT engine with one execution context per instance (see module docstring)."""

    name = NAME
    cancellation = Cancellation.NONE

    def __init__(self, model_dir: Path, manifest: Manifest, options: BackendOptions) -> None:
        runtime = _load_runtime()
        trt, cuda = runtime.trt, runtime.cuda
        self._cuda = cuda
        rel = manifest.artifacts.get(NAME)
        onnx_path = artifact_path(model_dir, manifest, NAME if rel else "onnxruntime")
        spec = build_spec(manifest)
        self._max_batch = spec["max_batch"]
        device = cuda.Device(0)
        self.device = f"cuda:0 ({device.name()})"
        self._ctx = device.retain_primary_context()
        self._ctx.push()
        try:
            logger = trt.Logger(trt.Logger.WARNING)
            data = self._engine_bytes(runtime, model_dir, manifest, onnx_path, spec,
                                      options.state_dir)
            self._engine = trt.Runtime(logger).deserialize_cuda_engine(data)
            if self._engine is None:
                raise BackendError(f"TensorRT cannot deserialize the engine for "
                                   f"{manifest.name!r}; delete the engine cache and retry")
            names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
            self._inputs = [n for n in names
                            if self._engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
            self._outputs = [n for n in names if n not in self._inputs]
            self._instances = [_Instance(trt, cuda, self._engine, names, self._max_batch)
                               for _ in range(max(1, options.instances))]
        finally:
            self._ctx.pop()
        self.inputs = manifest.inputs
        self.outputs = manifest.outputs
        self._lock = threading.Lock()

    @staticmethod
    def _engine_bytes(runtime: TensorRt, model_dir: Path, manifest: Manifest, onnx_path: Path,
                      spec: dict[str, Any], state_dir: Path | None) -> bytes:
        prebuilt = TensorRtOptions.of(manifest).engines
        rel = prebuilt.get(engine_key(runtime.version, runtime.gpu_name))
        if rel and (Path(model_dir) / rel).is_file():
            return (Path(model_dir) / rel).read_bytes()
        key = cache_key(runtime.version, runtime.gpu_name, sha256_file(onnx_path), spec)
        cache_dir = Path(state_dir or model_dir) / "engines"
        cached = cache_dir / f"{key}.engine"
        if cached.is_file():
            return cached.read_bytes()
        try:
            data = build_engine(runtime, onnx_path, spec)
        except PackagerError as exc:
            raise BackendError(str(exc)) from exc
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, cached)
        return data

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        """Copy inputs into this instance's pinned buffers, run, copy outputs out."""
        inst = self._instances[instance]
        cuda = self._cuda
        self._ctx.push()
        try:
            for name in self._inputs:
                array = inputs[name]
                if array.shape and array.shape[0] > self._max_batch:
                    raise BackendError(f"TensorRT engine takes at most {self._max_batch} rows")
                host = inst.host[name][:array.size].reshape(array.shape)
                np.copyto(host, array, casting="same_kind")
                inst.context.set_input_shape(name, array.shape)
                cuda.memcpy_htod_async(inst.device[name], host, inst.stream)
            if not inst.context.execute_async_v3(inst.stream.handle):
                raise BackendError("TensorRT execute_async_v3 failed")
            shapes = {}
            for name in self._outputs:
                shape = tuple(inst.context.get_tensor_shape(name))
                size = int(np.prod(shape)) if shape else 1
                cuda.memcpy_dtoh_async(inst.host[name][:size], inst.device[name], inst.stream)
                shapes[name] = (shape, size)
            inst.stream.synchronize()
            return {name: inst.host[name][:size].reshape(shape).copy()
                    for name, (shape, size) in shapes.items()}
        finally:
            self._ctx.pop()

    def cancel(self, instance: int, execution: int) -> bool:
        """A running inference cannot be stopped here (Cancellation.NONE)."""
        return False

    def close(self) -> None:
        with self._lock:
            if not getattr(self, "_instances", None):  # never loaded, or closed
                return
            self._ctx.push()
            try:
                for inst in self._instances:
                    for dev in inst.device.values():
                        dev.free()
                self._instances = []
                self._engine = None
            finally:
                self._ctx.pop()


def load(model_dir: Path, manifest: Manifest, options: BackendOptions) -> TensorRtBackend:
    """Build (or take from the cache) and load the TensorRT engine of ``manifest``."""
    return TensorRtBackend(model_dir, manifest, options)


PLUGIN = BackendPlugin(load=load, runtime_modules=("tensorrt", "pycuda"),
                       cancellation=Cancellation.NONE)
"""The entry point ``edge_agent.backends: tensorrt``."""
