"""Numerical parity between the source model (ONNX Runtime, fp32) and a converted artifact.

Both run on the same seeded inputs at two batch sizes; the report records max absolute and
relative error per output and, for outputs that look like class scores, top-1 agreement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packager.datatypes import NUMPY_DTYPES
from packager.errors import ConversionError
from packager.manifest import TensorSpec
from packager.profiles import ParityTolerance

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
SEED = 20240601


def seeded_inputs(inputs: Sequence[TensorSpec], batch: int | None,
                  seed: int = SEED) -> dict[str, np.ndarray]:
    """Deterministic inputs: normal floats, small non-negative integers, random bools.

    ``batch`` replaces dim 0 when not None; other dynamic dims become 1.
    """
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in inputs:
        shape = list(spec.shape)
        if batch is not None and shape:
            shape[0] = batch
        shape = [1 if d < 0 else d for d in shape]
        dtype = NUMPY_DTYPES[spec.datatype]
        arr: np.ndarray
        if spec.datatype in ("FP16", "FP32", "FP64"):
            arr = rng.standard_normal(shape).astype(dtype)
        elif spec.datatype == "BOOL":
            arr = rng.integers(0, 2, shape).astype(np.bool_)
        elif spec.datatype == "BYTES":
            raise ConversionError(f"parity check cannot feed BYTES input {spec.name!r}")
        else:
            arr = rng.integers(0, 10, shape).astype(dtype)
        feeds[spec.name] = arr
    return feeds


def onnxruntime_runner(model_path: Path, threads: int = 0) -> Runner:
    """Run an ONNX file with ONNX Runtime on CPU."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, sess.run(names, feeds), strict=True))

    return run


def openvino_runner(xml_path: Path, inference_precision: str = "f32",
                    hint: str = "LATENCY") -> Runner:
    """Compile an OpenVINO IR for the CPU and run it."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(str(xml_path), "CPU", {
        "INFERENCE_PRECISION_HINT": inference_precision, "PERFORMANCE_HINT": hint})
    outputs = [(o.get_any_name(), o) for o in compiled.outputs]
    request = compiled.create_infer_request()

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        res = request.infer(feeds)
        return {name: np.array(res[port]) for name, port in outputs}

    return run


def _looks_like_scores(ref: np.ndarray, batched: bool) -> bool:
    if ref.dtype.kind != "f" or ref.ndim < 1:
        return False
    rows = ref.shape[0] if batched and ref.ndim >= 2 else 1
    return ref.size // max(rows, 1) >= 2 and (ref.ndim >= 2 or not batched)


def compare_outputs(ref: np.ndarray, got: np.ndarray, tol: ParityTolerance,
                    batched: bool) -> dict[str, Any]:
    """Errors of one output: max abs/rel error, elements out of tolerance, top-1 agreement."""
    if ref.shape != got.shape:
        return {"passed": False, "error": f"shape {list(got.shape)} != source {list(ref.shape)}"}
    r = ref.astype(np.float64)
    g = got.astype(np.float64)
    if not np.all(np.isfinite(g[np.isfinite(r)])):
        return {"passed": False, "error": "the artifact produced NaN or infinite values"}
    diff = np.abs(r - g)
    scale = np.abs(r)
    # relative error over elements that matter (>= 1e-3 of the output's largest magnitude)
    big = scale >= max(float(scale.max(initial=0.0)) * 1e-3, 1e-12)
    rel = float((diff[big] / scale[big]).max(initial=0.0))
    bad = int(np.count_nonzero(diff > tol.atol + tol.rtol * scale))
    report: dict[str, Any] = {
        "max_abs_error": float(diff.max(initial=0.0)),
        "max_rel_error": rel,
        "out_of_tolerance": bad,
        "elements": int(ref.size),
    }
    passed = bad == 0
    if _looks_like_scores(ref, batched):
        rows = ref.shape[0] if batched else 1
        rr, gg = r.reshape(rows, -1), g.reshape(rows, -1)
        top2 = np.sort(rr, axis=1)[:, -2:]
        decided = (top2[:, 1] - top2[:, 0]) > tol.atol  # rows whose reference top-1 is no tie
        agree = rr.argmax(axis=1) == gg.argmax(axis=1)
        n = int(decided.sum())
        report["top1_rows"] = n
        report["top1_agreement"] = float(agree[decided].mean()) if n else None
        if n and report["top1_agreement"] < tol.min_top1_agreement:
            passed = False
    report["passed"] = passed
    return report


def check_parity(source: Runner, candidate: Runner, inputs: Sequence[TensorSpec],
                 batch_sizes: Sequence[int | None], tol: ParityTolerance,
                 seed: int = SEED) -> dict[str, Any]:
    """Run both on seeded inputs at each batch size; a report with an overall ``passed``."""
    per_batch: dict[str, Any] = {}
    worst_abs, worst_rel, passed = 0.0, 0.0, True
    agreements: list[float] = []
    for b in batch_sizes:
        feeds = seeded_inputs(inputs, b, seed)
        want = source(feeds)
        got = candidate(feeds)
        outs: dict[str, Any] = {}
        for name, ref in want.items():
            if name not in got:
                outs[name] = {"passed": False, "error": "output missing from the artifact"}
            else:
                outs[name] = compare_outputs(ref, got[name], tol, batched=b is not None)
            o = outs[name]
            passed = passed and o["passed"]
            worst_abs = max(worst_abs, o.get("max_abs_error", 0.0))
            worst_rel = max(worst_rel, o.get("max_rel_error", 0.0))
            if o.get("top1_agreement") is not None:
                agreements.append(o["top1_agreement"])
        per_batch[str(b if b is not None else 1)] = outs
    return {
        "passed": passed,
        "max_abs_error": worst_abs,
        "max_rel_error": worst_rel,
        "top1_agreement": min(agreements) if agreements else None,
        "batch_sizes": [b if b is not None else 1 for b in batch_sizes],
        "per_batch": per_batch,
    }
