"""TensorRT: the bundle carries the ONNX model plus a build spec; an engine is prebuilt only
where TensorRT and an NVIDIA GPU are present (engines are tied to the TensorRT version and GPU).
The engine build itself is :mod:`packager.bundle.tensorrt_engine`, which the agent uses too.

TensorRT and pycuda are imported lazily, so this module imports fine everywhere.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from packager.artifact import Artifact
from packager.bundle.errors import ConversionError
from packager.bundle.parity import Runner
from packager.bundle.tensorrt_engine import (
    SPEC_KEYS,
    TensorRtUnavailableError,
    build_engine,
    engine_key,
    load_tensorrt,
)

__all__ = ["engine_key", "engine_runner", "tensorrt_available", "to_tensorrt"]


def tensorrt_available() -> tuple[bool, str]:
    """(True, gpu name) when TensorRT and a CUDA GPU can be used here, else (False, reason)."""
    try:
        return True, load_tensorrt().gpu_name
    except TensorRtUnavailableError as exc:
        return False, str(exc)


def to_tensorrt(src: Path, out_dir: Path, precision: str, options: dict[str, Any]) -> Artifact:
    """Copy the ONNX model into the bundle with its build spec; prebuild an engine when possible.

    ``options`` holds the build spec (min_batch, opt_batch, max_batch, workspace_mb).
    """
    entry = out_dir / "model.onnx"
    shutil.copyfile(src, entry)
    spec: dict[str, Any] = {k: options[k] for k in SPEC_KEYS if k != "precision"}
    spec["precision"] = precision
    spec["onnx"] = "artifacts/tensorrt/model.onnx"
    spec["engines"] = {}
    notes: list[str] = []
    try:
        runtime = load_tensorrt()
    except TensorRtUnavailableError as exc:
        notes.append(f"no prebuilt engine: {exc}; the agent builds it on the device")
    else:  # pragma: no cover - needs TensorRT and a GPU
        engine = build_engine(runtime, entry, spec)
        key = engine_key(runtime.version, runtime.gpu_name)
        (out_dir / "engines").mkdir(exist_ok=True)
        (out_dir / "engines" / f"{key}.engine").write_bytes(engine)
        spec["engines"][key] = f"artifacts/tensorrt/engines/{key}.engine"
        notes.append(f"prebuilt engine for TensorRT {runtime.version} on {runtime.gpu_name}")
    return Artifact("tensorrt", precision, "artifacts/tensorrt/model.onnx", spec, notes)


def engine_runner(engine_path: Path) -> Runner:  # pragma: no cover - needs TensorRT and a GPU
    """A parity runner for a serialized engine (TensorRT 10 tensor API, pycuda buffers)."""
    import numpy as np
    import pycuda.autoinit  # noqa: F401  (creates a CUDA context)
    import pycuda.driver as cuda
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    engine = trt.Runtime(logger).deserialize_cuda_engine(Path(engine_path).read_bytes())
    if engine is None:
        raise ConversionError(f"TensorRT cannot deserialize {engine_path}")
    context = engine.create_execution_context()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    outputs = [n for n in names if n not in inputs]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        stream = cuda.Stream()
        keep = []
        for name in inputs:
            arr = np.ascontiguousarray(
                feeds[name].astype(trt.nptype(engine.get_tensor_dtype(name))))
            context.set_input_shape(name, arr.shape)
            dev = cuda.mem_alloc(max(arr.nbytes, 1))
            cuda.memcpy_htod_async(dev, arr, stream)
            context.set_tensor_address(name, int(dev))
            keep.append(dev)
        results = {}
        for name in outputs:
            shape = tuple(context.get_tensor_shape(name))
            host = np.empty(shape, dtype=trt.nptype(engine.get_tensor_dtype(name)))
            dev = cuda.mem_alloc(max(host.nbytes, 1))
            context.set_tensor_address(name, int(dev))
            keep.append(dev)
            results[name] = (host, dev)
        context.execute_async_v3(stream.handle)
        for host, dev in results.values():
            cuda.memcpy_dtoh_async(host, dev, stream)
        stream.synchronize()
        return {name: host for name, (host, _) in results.items()}

    return run
