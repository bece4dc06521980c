"""Per-backend conversion of a prepared ONNX model into bundle artifacts.

Each converter writes under ``stage/artifacts/<backend>/`` and returns an :class:`Artifact`
naming the entry file the agent's backend loads. Runtimes are imported lazily.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import onnx

from packager.artifact import Artifact
from packager.errors import ConversionError
from packager.onnx_tools import custom_domain_nodes
from packager.tensorrt_build import to_tensorrt

__all__ = ["Artifact", "check_ops", "convert"]

# op domains each backend understands besides standard ONNX
_EXTRA_DOMAINS = {
    "onnxruntime": ("com.microsoft",),
    "openvino": (),
    "tensorrt": (),
}
_QUANT_MIN_OPSET = 13


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def check_ops(model: onnx.ModelProto, backend: str, source: str) -> None:
    """ConversionError naming the first op the backend cannot convert (a foreign op domain)."""
    bad = custom_domain_nodes(model, _EXTRA_DOMAINS.get(backend, ()))
    if bad:
        n = bad[0]
        raise ConversionError(
            f"{source}: backend {backend} cannot convert op {n.domain}::{n.op_type} "
            f"(node {n.name or n.output[0]!r}); only standard ONNX ops are supported")


def convert(backend: str, precision: str, src: Path, model: onnx.ModelProto, stage: Path,
            options: dict[str, Any], source_name: str) -> Artifact:
    """Convert the prepared model at ``src`` for ``backend`` at ``precision`` into ``stage``."""
    check_ops(model, backend, source_name)
    out_dir = stage / "artifacts" / backend
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        if backend == "openvino":
            return _to_openvino(src, out_dir, precision, options)
        if backend == "onnxruntime":
            return _to_onnxruntime(src, model, out_dir, precision, options)
        if backend == "tensorrt":
            return to_tensorrt(src, out_dir, precision, options)
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"{source_name}: {backend} conversion ({precision}) failed: "
                              f"{_first_line(exc)}") from exc
    raise ConversionError(f"unknown backend {backend!r}")


def _to_openvino(src: Path, out_dir: Path, precision: str,
                 options: dict[str, Any]) -> Artifact:
    import openvino as ov

    model = ov.convert_model(str(src))
    xml = out_dir / "model.xml"
    # save_model compresses weights to fp16 by default: be explicit either way
    ov.save_model(model, str(xml), compress_to_fp16=(precision == "fp16"))
    opts = {
        "performance_hint": str(options.get("performance_hint", "THROUGHPUT")),
        "inference_precision": "f32",
        "weights": precision,
    }
    return Artifact("openvino", precision, "artifacts/openvino/model.xml", opts)


def _ort_optimize(src: Path, dst: Path, level: str) -> None:
    import onnxruntime as ort

    levels = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }
    if level not in levels:
        raise ConversionError(f"onnxruntime optimization_level must be basic or extended, "
                              f"not {level!r}")
    so = ort.SessionOptions()
    so.graph_optimization_level = levels[level]
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])


def _to_onnxruntime(src: Path, model: onnx.ModelProto, out_dir: Path, precision: str,
                    options: dict[str, Any]) -> Artifact:
    level = str(options.get("optimization_level", "basic"))
    entry = out_dir / "model.onnx"
    if precision == "int8":
        from onnx import version_converter
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp = out_dir.parent.parent / ".quant"
        tmp.mkdir(exist_ok=True)
        try:
            m = model
            opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
            if opset < _QUANT_MIN_OPSET:
                m = version_converter.convert_version(m, _QUANT_MIN_OPSET)
                m.ir_version = max(m.ir_version, 7)
            upgraded = tmp / "upgraded.onnx"
            onnx.save(m, str(upgraded))
            optimized = tmp / "optimized.onnx"
            # basic rewrites fold constants (e.g. ConstantOfShape weights) into initializers
            _ort_optimize(upgraded, optimized, "basic")
            # the quantizer warns on the root logger about pre-processing (done above)
            logging.disable(logging.WARNING)
            try:
                quantize_dynamic(str(optimized), str(entry), weight_type=QuantType.QInt8)
            finally:
                logging.disable(logging.NOTSET)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        level = "basic"
    else:
        _ort_optimize(src, entry, level)
    return Artifact("onnxruntime", precision, "artifacts/onnxruntime/model.onnx",
                    {"optimization_level": level, "quantization": "dynamic-int8"
                     if precision == "int8" else "none"})
