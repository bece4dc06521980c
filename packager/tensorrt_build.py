"""TensorRT: the bundle carries the ONNX model plus a build spec; an engine is prebuilt only
where TensorRT and an NVIDIA GPU are present (engines are tied to the TensorRT version and GPU).

TensorRT and pycuda are imported lazily, so this module imports fine everywhere.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from packager.converters import Artifact
from packager.errors import ConversionError
from packager.parity import Runner


def tensorrt_available() -> tuple[bool, str]:
    """(True, gpu name) when TensorRT and a CUDA GPU can be used here, else (False, reason)."""
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return False, "TensorRT (the tensorrt Python package) is not installed"
    try:
        import pycuda.driver as cuda
    except ImportError:
        return False, "pycuda is not installed (needed to find the GPU)"
    try:
        cuda.init()
        if cuda.Device.count() < 1:
            return False, "no CUDA GPU is present"
        return True, str(cuda.Device(0).name())
    except Exception as exc:  # cuda.Error: no driver, no device
        return False, f"no usable CUDA GPU ({exc})"


def engine_key(trt_version: str, gpu_name: str) -> str:
    """File-name-safe key of an engine: ``<tensorrt version>-<gpu name>``."""
    gpu = re.sub(r"[^A-Za-z0-9_.-]+", "_", gpu_name).strip("_") or "gpu"
    return f"{trt_version}-{gpu}"


def build_engine(onnx_path: Path, spec: dict[str, Any], input_names: list[str],
                 input_shapes: dict[str, tuple[int, ...]]) -> bytes:
    """Build a serialized TensorRT engine from an ONNX file with an optimization profile on the
    batch dim (min/opt/max from ``spec``) and the fp16 flag when ``spec['precision']`` is fp16."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH") and int(
            trt.__version__.split(".")[0]) < 10:
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(Path(onnx_path).read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ConversionError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(spec["workspace_mb"]) << 20)
    if spec["precision"] == "fp16":
        if not getattr(builder, "platform_has_fast_fp16", True):
            raise ConversionError("this GPU has no fast fp16; use an fp32 TensorRT profile")
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    for name in input_names:
        rest = tuple(input_shapes[name][1:])
        if any(d < 0 for d in rest):
            raise ConversionError(f"TensorRT input {name!r} has dynamic non-batch dims {rest}; "
                                  "export the model with fixed non-batch dims")
        profile.set_shape(name, (spec["min_batch"], *rest), (spec["opt_batch"], *rest),
                          (spec["max_batch"], *rest))
    config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise ConversionError(f"TensorRT failed to build an engine from {onnx_path}")
    return bytes(engine)


def to_tensorrt(src: Path, out_dir: Path, precision: str, options: dict[str, Any]) -> Artifact:
    """Copy the ONNX model into the bundle with its build spec; prebuild an engine when possible.

    ``options`` holds the build spec (precision, min_batch, opt_batch, max_batch, workspace_mb)
    and ``input_shapes`` ({name: shape}) used for the optimization profile.
    """
    entry = out_dir / "model.onnx"
    shutil.copyfile(src, entry)
    spec = {k: options[k] for k in ("min_batch", "opt_batch", "max_batch", "workspace_mb")}
    spec["precision"] = precision
    spec["onnx"] = "artifacts/tensorrt/model.onnx"
    spec["engines"] = {}
    notes: list[str] = []
    ok, detail = tensorrt_available()
    if ok:
        import tensorrt as trt

        shapes = options["input_shapes"]
        engine = build_engine(entry, spec, list(shapes), shapes)
        key = engine_key(trt.__version__, detail)
        (out_dir / "engines").mkdir(exist_ok=True)
        (out_dir / "engines" / f"{key}.engine").write_bytes(engine)
        spec["engines"][key] = f"artifacts/tensorrt/engines/{key}.engine"
        notes.append(f"prebuilt engine for TensorRT {trt.__version__} on {detail}")
    else:
        notes.append(f"no prebuilt engine: {detail}; the agent builds it on the device")
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
