"""Numerical parity between the source model (ONNX Runtime, fp32) and a converted artifact.

Both run on the same seeded inputs at two batch sizes; the report records max absolute and
relative error per output and, for outputs that look like class scores, top-1 agreement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packager.bundle.datatypes import NUMPY_DTYPES
from packager.bundle.errors import ConversionError, UsageError
from packager.bundle.manifest import TensorSpec
from packager.bundle.profiles import ParityTolerance

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
        if n and tol.top1_only:
            passed = report["top1_agreement"] >= tol.min_top1_agreement
        elif n and report["top1_agreement"] < tol.min_top1_agreement:
            passed = False
    report["passed"] = passed
    return report


def require_one_array_per_input(where: str, given: Mapping[str, Any],
                                inputs: Sequence[TensorSpec]) -> None:
    """UsageError naming the missing and unknown names unless ``given`` (a data file's
    arrays, ``where`` it came from) holds exactly one array per model input."""
    names = [s.name for s in inputs]
    missing = [n for n in names if n not in given]
    extra = sorted(set(given) - set(names))
    if missing or extra:
        raise UsageError(f"{where}: needs one array per model input ({', '.join(names)}); "
                         f"missing: {', '.join(missing) or 'none'}, unknown: "
                         f"{', '.join(extra) or 'none'}")


def check_parity(source: Runner, candidate: Runner, inputs: Sequence[TensorSpec],
                 batch_sizes: Sequence[int | None], tol: ParityTolerance,
                 seed: int = SEED) -> dict[str, Any]:
    """Run both on seeded inputs at each batch size; a report with an overall ``passed``."""
    cases = []
    for b in batch_sizes:
        feeds = seeded_inputs(inputs, b, seed)
        cases.append(ReferenceCase(b, feeds, source(feeds)))
    return check_reference(candidate, cases, tol)


# ---------------------------------------------------------------------------------- reference data
# Reference inputs and the source model's outputs for them, stored in every bundle
# (``reference.npz``, hashed in the signed manifest) so a device can check its own runtime.

REFERENCE_FILE = "reference.npz"
REFERENCE_MAX_BYTES = 384 * 1024  # raw array bytes; larger cases are dropped (batch 1 kept first)
_META_KEY = "meta"
GivenInputs = tuple[dict[str, np.ndarray], str]
"""Real reference inputs (by input name) and where they came from (a file name)."""


@dataclass(frozen=True)
class ReferenceCase:
    """One reference request: ``rows`` (None for an unbatched model), its inputs and the
    source model's outputs."""

    rows: int | None
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        """Raw size of every array of this case."""
        return sum(a.nbytes for a in (*self.inputs.values(), *self.outputs.values()))


def load_given_inputs(path: Path, inputs: Sequence[TensorSpec],
                      batched: bool) -> dict[str, np.ndarray]:
    """Real inputs from ``--reference-data FILE.npz`` (one array per model input, by name),
    checked against the model's signature; UsageError naming what is wrong."""
    try:
        with np.load(path, allow_pickle=False) as data:
            given = {k: np.asarray(data[k]) for k in data.files}
    except FileNotFoundError:
        raise UsageError(f"--reference-data {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--reference-data {path}: not a readable .npz file of arrays "
                         f"({exc})") from None
    require_one_array_per_input(f"--reference-data {path}", given, inputs)
    out: dict[str, np.ndarray] = {}
    rows: set[int] = set()
    for spec in inputs:
        arr, dtype = given[spec.name], np.dtype(NUMPY_DTYPES[spec.datatype])
        if spec.datatype == "BYTES" or not np.can_cast(arr.dtype, dtype, "same_kind"):
            raise UsageError(f"--reference-data {path}: input {spec.name!r} is {arr.dtype}, "
                             f"the model takes {spec.datatype}")
        fixed = [(i, d) for i, d in enumerate(spec.shape) if d >= 0 and not (batched and i == 0)]
        if arr.ndim != len(spec.shape) or any(arr.shape[i] != d for i, d in fixed):
            raise UsageError(f"--reference-data {path}: input {spec.name!r} has shape "
                             f"{list(arr.shape)}, the model takes {list(spec.shape)} "
                             "(-1: any size)")
        if batched:
            if arr.shape[0] < 1:
                raise UsageError(f"--reference-data {path}: input {spec.name!r} has no rows")
            rows.add(arr.shape[0])
        out[spec.name] = arr.astype(dtype)
    if len(rows) > 1:
        raise UsageError(f"--reference-data {path}: the inputs have different numbers of rows "
                         f"({sorted(rows)}); give the same rows for every input")
    return out


def make_reference(source: Runner, inputs: Sequence[TensorSpec],
                   batch_sizes: Sequence[int | None],
                   given: dict[str, np.ndarray] | None = None,
                   max_bytes: int = REFERENCE_MAX_BYTES, seed: int = SEED) -> list[ReferenceCase]:
    """Reference cases at ``batch_sizes`` (seeded inputs, or the first rows of ``given``),
    with the source model's outputs; cases past ``max_bytes`` in all are left out."""
    cases: list[ReferenceCase] = []
    total = 0
    for b in batch_sizes:
        if given is None:
            feeds = seeded_inputs(inputs, b, seed)
        elif b is None:
            feeds = dict(given)
        else:
            have = min(len(a) for a in given.values())
            if cases and have <= (cases[-1].rows or 0):
                break  # no more rows than the case before
            feeds = {k: a[:min(b, have)] for k, a in given.items()}
        rows = None if b is None else next(iter(feeds.values())).shape[0]
        case = ReferenceCase(rows, feeds, source(feeds))
        if total + case.nbytes > max_bytes:
            break
        cases.append(case)
        total += case.nbytes
    return cases


def save_reference(path: Path, cases: Sequence[ReferenceCase], origin: str) -> None:
    """Write ``cases`` as one .npz: arrays ``cN_in_K``/``cN_out_K`` and a JSON ``meta``."""
    import json

    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {"origin": origin, "cases": []}
    for i, case in enumerate(cases):
        entry: dict[str, Any] = {"rows": case.rows, "inputs": {}, "outputs": {}}
        for kind, tensors in (("in", case.inputs), ("out", case.outputs)):
            for k, (name, arr) in enumerate(tensors.items()):
                key = f"c{i}_{kind}_{k}"
                arrays[key] = arr
                entry["inputs" if kind == "in" else "outputs"][name] = key
        meta["cases"].append(entry)
    arrays[_META_KEY] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)  # type: ignore[arg-type]  # names are str keys


def load_reference(path: Path) -> tuple[str, list[ReferenceCase]]:
    """Read a bundle's reference file: (origin, cases). ConversionError when malformed."""
    import json

    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data[_META_KEY]).decode())
            cases = [ReferenceCase(
                c["rows"], {n: np.asarray(data[k]) for n, k in c["inputs"].items()},
                {n: np.asarray(data[k]) for n, k in c["outputs"].items()})
                for c in meta["cases"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConversionError(f"reference data {path.name} is unreadable: {exc}") from None
    return str(meta.get("origin", "")), cases


def check_reference(run: Runner, cases: Sequence[ReferenceCase],
                    tol: ParityTolerance) -> dict[str, Any]:
    """Run each reference case through ``run`` and compare with the stored source outputs;
    a report shaped like :func:`check_parity`'s."""
    per_batch: dict[str, Any] = {}
    worst_abs, worst_rel, passed = 0.0, 0.0, True
    agreements: list[float] = []
    for case in cases:
        got = run(dict(case.inputs))
        outs: dict[str, Any] = {}
        for name, ref in case.outputs.items():
            if name not in got:
                outs[name] = {"passed": False, "error": "output missing from the artifact"}
            else:
                outs[name] = compare_outputs(ref, np.asarray(got[name]), tol,
                                             batched=case.rows is not None)
            o = outs[name]
            passed = passed and o["passed"]
            worst_abs = max(worst_abs, o.get("max_abs_error", 0.0))
            worst_rel = max(worst_rel, o.get("max_rel_error", 0.0))
            if o.get("top1_agreement") is not None:
                agreements.append(o["top1_agreement"])
        per_batch[str(case.rows if case.rows is not None else 1)] = outs
    return {
        "passed": passed,
        "max_abs_error": worst_abs,
        "max_rel_error": worst_rel,
        "top1_agreement": min(agreements) if agreements else None,
        "batch_sizes": [c.rows if c.rows is not None else 1 for c in cases],
        "per_batch": per_batch,
    }


def first_error(report: dict[str, Any]) -> str:
    """The first per-output error text of a report ('' when none)."""
    for outs in report.get("per_batch", {}).values():
        for name, o in outs.items():
            if o.get("error"):
                return f"output {name!r}: {o['error']}"
    return ""


def summary(report: dict[str, Any], tol: ParityTolerance) -> str:
    """One line of figures: max abs/rel error, top-1 agreement, against the tolerance."""
    top1 = report.get("top1_agreement")
    text = (f"max abs error {report['max_abs_error']:.3g}, max rel error "
            f"{report['max_rel_error']:.3g}, top-1 agreement "
            f"{'n/a' if top1 is None else f'{top1:.3g}'} at batch sizes "
            f"{report['batch_sizes']} (tolerance atol={tol.atol:g}, rtol={tol.rtol:g}, "
            f"min top-1 {tol.min_top1_agreement:g})")
    err = first_error(report)
    return f"{text}; {err}" if err else text
