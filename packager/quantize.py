"""Int8 quantization of ONNX models: static (calibrated, QDQ) and dynamic (weights only).

Static post-training quantization runs ONNX Runtime's ``quantize_static`` on representative
inputs (packager/calibration.py) and writes a QDQ model: int8 weights (per output channel)
and int8/uint8 activations with scales measured on the calibration rows. ONNX Runtime runs it
with its integer kernels (QLinearConv, QGemm), and OpenVINO reads the same QDQ graph as
FakeQuantize and runs its int8 kernels, so one calibrated model serves both runtimes
(docs/quantization.md says why NNCF is not used). Parity of a calibrated model is measured on
the held-out rows: top-1 agreement with the fp32 source and max error.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from packager.bundle.errors import ConversionError
from packager.bundle.parity import ReferenceCase, Runner, check_reference
from packager.bundle.profiles import ParityTolerance
from packager.calibration import CalibrationData

QUANT_MIN_OPSET = 13
CALIB_BATCH = 32  # rows per calibration run (batched models)
STATIC = "static-int8-qdq"
DYNAMIC = "dynamic-int8"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


QUANTIZED_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})


def has_quantizable_ops(model: onnx.ModelProto) -> bool:
    """Whether ``model`` has a node int8 quantization turns into integer arithmetic (a tree
    ensemble of ai.onnx.ml ops has none; an MLP classifier with a label lookup has)."""
    return any(n.op_type in QUANTIZED_OPS and n.domain in ("", "ai.onnx")
               for n in model.graph.node)


def attention_scope(model: onnx.ModelProto) -> tuple[list[str], list[str]] | None:
    """For a model with attention (a Softmax over a product of two activations), what to
    quantize: (op types, nodes to exclude). Only the weight-bearing MatMul/Gemm/Conv become
    int8; the activation x activation products (Q.K^T, P.V), Softmax, LayerNormalization and
    the residual Adds stay float, where int8's error changes a transformer's answers (measured
    on an encoder block: top-1 agreement 0.972 with every op quantized, 0.982 this way).
    None for every other model (everything ONNX Runtime can quantize is)."""
    constants = {i.name for i in model.graph.initializer}
    constants |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    products = [n.name for n in model.graph.node if n.op_type == "MatMul"
                and not any(i in constants for i in n.input)]
    if not products or not any(n.op_type == "Softmax" for n in model.graph.node):
        return None
    return sorted(QUANTIZED_OPS), products


def prepare_for_quantization(model: onnx.ModelProto, work: Path) -> Path:
    """The model at opset >= 13 with constants folded (ONNX Runtime basic rewrites): what both
    quantizers want as input. Written under ``work``; its path."""
    import onnxruntime as ort
    from onnx import version_converter

    m = model
    unnamed = [n for n in m.graph.node if not n.name]
    if unnamed:  # the quantizer selects and excludes nodes by name
        m = onnx.ModelProto()
        m.CopyFrom(model)
        taken = {n.name for n in m.graph.node}
        for i, node in enumerate(m.graph.node):
            if not node.name:
                name = f"{node.op_type}_{i}"
                while name in taken:
                    name += "_"
                node.name = name
                taken.add(name)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < QUANT_MIN_OPSET:
        m = version_converter.convert_version(m, QUANT_MIN_OPSET)
        m.ir_version = max(m.ir_version, 7)
    upgraded = work / "upgraded.onnx"
    onnx.save(m, str(upgraded))
    optimized = work / "optimized.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(optimized)
    so.log_severity_level = 3
    ort.InferenceSession(str(upgraded), so, providers=["CPUExecutionProvider"])
    return optimized


def quantize_dynamic_int8(model: onnx.ModelProto, dst: Path, work: Path) -> None:
    """Weights-only int8 (dynamic quantization of activations at run time): pays off for
    MatMul-heavy models (MLPs, transformers), not for CNNs (ConvInteger is slow)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = prepare_for_quantization(model, work)
    logging.disable(logging.WARNING)  # it warns on the root logger about pre-processing
    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)


def _samples(arrays: dict[str, np.ndarray], batched: bool,
             batch: int = CALIB_BATCH) -> Iterator[dict[str, np.ndarray]]:
    n = len(next(iter(arrays.values())))
    if not batched:
        for i in range(n):
            yield {k: a[i] for k, a in arrays.items()}
        return
    for i in range(0, n, batch):
        yield {k: a[i:i + batch] for k, a in arrays.items()}


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol over the calibration rows."""

    def __init__(self, arrays: dict[str, np.ndarray], batched: bool) -> None:
        self._it = _samples(arrays, batched)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def quantize_static_int8(model: onnx.ModelProto, dst: Path, data: CalibrationData,
                         batched: bool, work: Path, per_channel: bool = True) -> dict[str, Any]:
    """Write the calibrated QDQ model to ``dst``; what was done, for the manifest."""
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    work.mkdir(parents=True, exist_ok=True)
    adjusted = True
    try:
        src = prepare_for_quantization(model, work)
        options = {"WeightSymmetric": True, "ActivationSymmetric": False}
        scope = attention_scope(onnx.load(str(src)))
        narrowed: dict[str, Any] = {}
        if scope is not None:
            narrowed = {"op_types_to_quantize": scope[0], "nodes_to_exclude": scope[1]}
        logging.disable(logging.WARNING)
        try:
            try:
                quantize_static(
                    str(src), str(dst), _Reader(data.calibrate, batched),
                    quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, extra_options=options,
                    **narrowed)
            except ValueError as exc:
                if "truth value of an array" not in str(exc):
                    raise
                # ONNX Runtime's enlargement of per-channel weight scales for int32 biases
                # fails on a MatMul + Add whose bias it reaches per channel (skl2onnx and
                # PyTorch MLPs): quantize without that adjustment; the held-out parity check
                # then says whether the biases kept their precision
                adjusted = False
                quantize_static(
                    str(src), str(dst), _Reader(data.calibrate, batched),
                    quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax,
                    extra_options={**options, "QDQDisableWeightAdjustForInt32Bias": True},
                    **narrowed)
        finally:
            logging.disable(logging.NOTSET)
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"static int8 quantization failed: {_first_line(exc)}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n_cal, n_held = data.sizes
    return {
        "method": STATIC, "tool": "onnxruntime.quantization.quantize_static",
        "calibration": "minmax", "per_channel_weights": per_channel,
        "int32_bias_weight_adjust": adjusted,
        "scope": ("weight-bearing ops only (MatMul, Gemm, Conv); attention products, Softmax "
                  "and normalization in float" if scope is not None else "every supported op"),
        "weights": "int8 symmetric", "activations": "uint8 asymmetric",
        "data": data.origin, "calibration_samples": n_cal, "held_out_samples": n_held,
    }


def _run_rows(run: Runner, arrays: dict[str, np.ndarray], batched: bool) -> dict[str, np.ndarray]:
    parts: dict[str, list[np.ndarray]] = {}
    for feeds in _samples(arrays, batched):
        for name, out in run(feeds).items():
            parts.setdefault(name, []).append(np.asarray(out) if batched
                                              else np.asarray(out)[None, ...])
    return {k: np.concatenate(v, axis=0) for k, v in parts.items()}


def held_out_parity(source: Runner, candidate: Runner, data: CalibrationData, batched: bool,
                    tol: ParityTolerance) -> dict[str, Any]:
    """Compare ``candidate`` with the fp32 ``source`` on the held-out rows.

    With ``tol.top1_only`` (calibrated int8) outputs that look like class scores pass on top-1
    agreement (at least the profile's ``min_top1_agreement``) and their max error is recorded,
    not gated; other outputs must stay within the profile's atol/rtol.
    """
    want = _run_rows(source, data.held_out, batched)
    report = check_reference(lambda feeds: _run_rows(candidate, feeds, batched),
                             [ReferenceCase(data.sizes[1], dict(data.held_out), want)], tol)
    report["inputs"] = f"{data.sizes[1]} held-out rows of {data.origin}"
    return report
