"""The TensorRT engine build, shared by the packager (a prebuilt engine in the bundle, where a
GPU is present) and the agent (the engine built on the device on first load).

An engine is tied to the TensorRT version and the GPU, so a bundle carries the ONNX model and a
build spec (``SPEC_KEYS``) plus any prebuilt engines keyed by :func:`engine_key`. TensorRT and
pycuda are imported only inside the functions that use them, so this module imports everywhere.

NOT VERIFIED ON HARDWARE: written against the TensorRT 10 and pycuda APIs on machines without
an NVIDIA GPU; the tests that build an engine skip there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packager.bundle.errors import ConversionError, ErrorCode, PackagerError

SPEC_KEYS = ("precision", "min_batch", "opt_batch", "max_batch", "workspace_mb")
"""The build spec: what an engine depends on besides the model, TensorRT and the GPU."""


class TensorRtUnavailableError(PackagerError):
    """TensorRT, pycuda or a usable CUDA GPU is missing here; the message says which."""

    code = ErrorCode.TENSORRT_UNAVAILABLE


@dataclass(frozen=True)
class TensorRt:
    """The imported runtime: the ``tensorrt`` and ``pycuda.driver`` modules and GPU 0's name."""

    trt: Any
    cuda: Any
    gpu_name: str

    @property
    def version(self) -> str:
        """The TensorRT version (``tensorrt.__version__``)."""
        return str(self.trt.__version__)


def load_tensorrt() -> TensorRt:
    """Import TensorRT and pycuda and find a CUDA GPU; TensorRtUnavailableError says what is
    missing."""
    try:
        import tensorrt as trt
    except ImportError:
        raise TensorRtUnavailableError(
            "TensorRT (the tensorrt Python package) is not installed") from None
    try:
        import pycuda.driver as cuda
    except ImportError:
        raise TensorRtUnavailableError(
            "pycuda is not installed (needed to find the GPU)") from None
    try:
        cuda.init()
        if cuda.Device.count() < 1:
            raise TensorRtUnavailableError("no CUDA GPU is present")
        name = str(cuda.Device(0).name())
    except TensorRtUnavailableError:
        raise
    except Exception as exc:  # cuda.Error: no driver, no device
        raise TensorRtUnavailableError(f"no usable CUDA GPU ({exc})") from exc
    return TensorRt(trt, cuda, name)


def engine_key(trt_version: str, gpu_name: str) -> str:
    """File-name-safe key of a prebuilt engine: ``<tensorrt version>-<gpu name>``."""
    gpu = re.sub(r"[^A-Za-z0-9_.-]+", "_", gpu_name).strip("_") or "gpu"
    return f"{trt_version}-{gpu}"


def build_engine(runtime: TensorRt, onnx_path: Path, spec: dict[str, Any]) -> bytes:
    """A serialized engine from the ONNX file: explicit-batch network, one optimization profile
    on the batch dim (``spec``'s min/opt/max batch), the workspace limit, and the fp16 flag when
    ``spec['precision']`` is fp16. ConversionError names what went wrong."""
    trt = runtime.trt
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if int(runtime.version.split(".")[0]) < 10 and hasattr(trt.NetworkDefinitionCreationFlag,
                                                            "EXPLICIT_BATCH"):
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):  # from the file: external data resolves
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ConversionError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(spec["workspace_mb"]) << 20)
    if spec["precision"] == "fp16":
        if not getattr(builder, "platform_has_fast_fp16", True):
            raise ConversionError("this GPU has no fast fp16; use a bundle built with an fp32 "
                                  "TensorRT profile")
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        rest = tuple(int(d) for d in tensor.shape)[1:]
        if any(d < 0 for d in rest):
            raise ConversionError(f"TensorRT input {tensor.name!r} has dynamic non-batch dims "
                                  f"{rest}; export the model with fixed non-batch dims")
        profile.set_shape(tensor.name, (spec["min_batch"], *rest), (spec["opt_batch"], *rest),
                          (spec["max_batch"], *rest))
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ConversionError(f"TensorRT failed to build an engine from {onnx_path}")
    return bytes(serialized)
