"""Per-backend conversion of a prepared ONNX model into bundle artifacts.

Each converter writes under ``stage/artifacts/<backend>/`` and returns an :class:`Artifact`
naming the entry file the agent's backend loads. Runtimes are imported lazily.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import onnx

from packager.artifact import Artifact
from packager.bundle.errors import ConversionError
from packager.external_data import externalize
from packager.onnx_tools import custom_domain_nodes
from packager.quantize import DYNAMIC, STATIC, quantize_dynamic_int8
from packager.tensorrt_build import to_tensorrt

__all__ = ["Artifact", "check_ops", "convert"]

# op domains each backend understands besides standard ONNX
_EXTRA_DOMAINS = {
    "onnxruntime": ("com.microsoft",),
    "openvino": (),
    "tensorrt": (),
}


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
            options: dict[str, Any], source_name: str,
            calibrated: Path | None = None) -> Artifact:
    """Convert the prepared model at ``src`` for ``backend`` at ``precision`` into ``stage``.

    ``calibrated`` is the statically quantized QDQ model (packager/quantize.py) that int8
    artifacts are made of; without it ONNX Runtime int8 is dynamic quantization and OpenVINO
    has no int8.
    """
    check_ops(model, backend, source_name)
    out_dir = stage / "artifacts" / backend
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        if backend == "openvino":
            return _to_openvino(src, out_dir, precision, options, calibrated)
        if backend == "onnxruntime":
            return _to_onnxruntime(src, model, out_dir, precision, options, calibrated)
        if backend == "tensorrt":
            return to_tensorrt(src, out_dir, precision, options)
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"{source_name}: {backend} conversion ({precision}) failed: "
                              f"{_first_line(exc)}") from exc
    raise ConversionError(f"unknown backend {backend!r}")


def _to_openvino(src: Path, out_dir: Path, precision: str,
                 options: dict[str, Any], calibrated: Path | None) -> Artifact:
    import openvino as ov

    if precision == "int8":
        if calibrated is None:
            raise ConversionError("OpenVINO int8 needs representative inputs: pass "
                                  "--calibration-data FILE.npz|DIR")
        src = calibrated  # QDQ nodes become FakeQuantize: OpenVINO's int8 kernels run them
    model = ov.convert_model(str(src))
    xml = out_dir / "model.xml"
    # save_model compresses weights to fp16 by default: be explicit either way
    ov.save_model(model, str(xml), compress_to_fp16=(precision == "fp16"))
    opts = {
        "performance_hint": str(options.get("performance_hint", "THROUGHPUT")),
        "inference_precision": "f32",
        "weights": precision,
    }
    if precision == "int8":
        opts["quantization"] = STATIC
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
                    options: dict[str, Any], calibrated: Path | None) -> Artifact:
    level = str(options.get("optimization_level", "basic"))
    entry = out_dir / "model.onnx"
    quantization = "none"
    if precision == "int8" and calibrated is not None:
        # the QDQ graph as written: ONNX Runtime fuses it into integer kernels at load time
        shutil.copyfile(calibrated, entry)
        level, quantization = "basic", STATIC
    elif precision == "int8":
        tmp = out_dir.parent.parent / ".quant"
        tmp.mkdir(exist_ok=True)
        try:
            quantize_dynamic_int8(model, entry, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        level, quantization = "basic", DYNAMIC
    else:
        _ort_optimize(src, entry, level)
    data = externalize(entry)
    return Artifact("onnxruntime", precision, "artifacts/onnxruntime/model.onnx",
                    {"optimization_level": level, "quantization": quantization},
                    external_data=tuple(f"artifacts/onnxruntime/{name}" for name in data))
