"""Tree and classical models in: XGBoost (JSON/UBJ), LightGBM (text), scikit-learn (skops).

Each is loaded with its own library (skops with an allow-list, never pickle), converted to
ONNX-ML (onnxmltools, skl2onnx) with one float input ``input`` [batch, features], and checked
against the library's own predictions before the usual per-profile build. Classifiers answer
``label`` [batch] (int64) and ``probabilities`` [batch, classes] (float32) as plain tensors, no
ZipMap; regressors answer ``variable`` [batch, 1]. The converter libraries come with the
``[trees]`` extra and are imported only here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from packager.bundle.errors import ConversionError, ModelError, ParityError

TREE_SUFFIXES = {".json": "xgboost", ".ubj": "xgboost", ".txt": "lightgbm", ".skops": "sklearn"}
INPUT = "input"
ONNX_OPSET = 15  # the highest onnxmltools' XGBoost and LightGBM converters take
ML_OPSET = 3
PARITY_ROWS = 256
PARITY_ATOL = 1e-4  # per probability / regression value, float32 trees vs the library
MIN_ROW_AGREEMENT = 0.99  # share of rows whose label and scores agree (float32 ties)
# skops refuses every type it does not know; these modules hold model classes only
SKOPS_TRUSTED_PREFIXES = ("sklearn.", "numpy.", "scipy.sparse.")
_DISTRIBUTIONS = {"xgboost": ("xgboost", "xgboost-cpu"), "lightgbm": ("lightgbm",),
                  "sklearn": ("scikit-learn", "skops", "skl2onnx")}

Predict = Callable[[np.ndarray], dict[str, np.ndarray]]


@dataclass
class TreeModel:
    """A converted model: the ONNX-ML graph, what it is, and the library's own predict."""

    kind: str  # xgboost | lightgbm | sklearn
    task: str  # classifier | regressor
    features: int
    model: onnx.ModelProto
    predict: Predict  # native: {"label", "probabilities"} or {"variable"}
    toolchain: dict[str, str] = field(default_factory=dict)


def tree_kind(path: Path) -> str | None:
    """The library a model file belongs to, by its suffix (None: not a tree model file)."""
    return TREE_SUFFIXES.get(Path(path).suffix.lower())


def _need(module: str, kind: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ModelError(f"a {kind} model needs the {module} package: pip install "
                         "'edgeship[trees]'") from None


def _versions(kind: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in (*_DISTRIBUTIONS[kind], "onnxmltools"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# ------------------------------------------------------------------------------------- loaders

def _check_xgboost_file(path: Path) -> None:
    head = path.read_bytes()[:4096]
    if path.suffix.lower() == ".json":
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(f"{path}: a .json model must be an XGBoost model saved with "
                             f"save_model('model.json'); this is not JSON ({exc})") from None
        if not isinstance(doc, dict) or "learner" not in doc:
            raise ModelError(f"{path}: JSON without a 'learner' object is not an XGBoost model "
                             "(save it with Booster.save_model or XGBClassifier.save_model)")
    elif not head.startswith(b"{") or b"learner" not in head:
        raise ModelError(f"{path}: not an XGBoost UBJSON model (save it with "
                         "save_model('model.ubj'))")


def _load_xgboost(path: Path) -> TreeModel:
    _check_xgboost_file(path)
    xgb = _need("xgboost", "XGBoost")
    booster = xgb.Booster()
    try:
        booster.load_model(str(path))
    except Exception as exc:
        raise ModelError(f"{path}: XGBoost cannot load it: {_first_line(exc)}") from None
    config = json.loads(booster.save_config())
    objective = config["learner"]["objective"]["name"]
    features = int(booster.num_features())
    task = "classifier" if objective.startswith(("binary:", "multi:")) else "regressor"
    if objective in ("multi:softmax", "binary:hinge"):
        raise ModelError(f"{path}: XGBoost objective {objective!r} gives no probabilities; "
                         "train with multi:softprob or binary:logistic")

    def predict(x: np.ndarray) -> dict[str, np.ndarray]:
        out = np.asarray(booster.predict(xgb.DMatrix(x)))
        return _as_outputs(task, out)

    onnxmltools = _need("onnxmltools", "XGBoost")
    from onnxmltools.convert.common.data_types import FloatTensorType

    try:
        model = onnxmltools.convert_xgboost(
            booster, initial_types=[(INPUT, FloatTensorType([None, features]))],
            target_opset=ONNX_OPSET)
    except Exception as exc:
        raise ConversionError(f"{path}: onnxmltools cannot convert this XGBoost model "
                              f"({objective}): {_first_line(exc)}") from None
    return TreeModel("xgboost", task, features, model, predict)


def _load_lightgbm(path: Path) -> TreeModel:
    head = path.read_bytes()[:64]
    if not head.startswith(b"tree\n") and not head.startswith(b"tree\r\n"):
        raise ModelError(f"{path}: a .txt model must be a LightGBM text model (it starts with "
                         "'tree'; save it with Booster.save_model('model.txt'))")
    lgb = _need("lightgbm", "LightGBM")
    try:
        booster = lgb.Booster(model_file=str(path))
    except Exception as exc:
        raise ModelError(f"{path}: LightGBM cannot load it: {_first_line(exc)}") from None
    objective = str(booster.dump_model(num_iteration=0).get("objective", ""))
    features = int(booster.num_feature())
    task = "classifier" if objective.startswith(("binary", "multiclass")) else "regressor"
    if objective.startswith("multiclassova"):
        raise ModelError(f"{path}: LightGBM objective multiclassova is not supported; train "
                         "with multiclass")

    def predict(x: np.ndarray) -> dict[str, np.ndarray]:
        return _as_outputs(task, np.asarray(booster.predict(x)))

    onnxmltools = _need("onnxmltools", "LightGBM")
    from onnxmltools.convert.common.data_types import FloatTensorType

    try:
        model = onnxmltools.convert_lightgbm(
            booster, initial_types=[(INPUT, FloatTensorType([None, features]))],
            target_opset=ONNX_OPSET, zipmap=False)
    except Exception as exc:
        raise ConversionError(f"{path}: onnxmltools cannot convert this LightGBM model "
                              f"({objective}): {_first_line(exc)}") from None
    return TreeModel("lightgbm", task, features, model, predict)


def _load_sklearn(path: Path) -> TreeModel:
    sio = _need("skops.io", "scikit-learn (skops)")
    try:
        untrusted = list(sio.get_untrusted_types(file=str(path)))
    except Exception as exc:
        raise ModelError(f"{path}: not a skops file (save the model with skops.io.dump; "
                         f"pickle files are refused because loading them runs code): "
                         f"{_first_line(exc)}") from None
    refused = [t for t in untrusted if not t.startswith(SKOPS_TRUSTED_PREFIXES)]
    if refused:
        raise ModelError(f"{path}: the skops file names types outside scikit-learn and numpy "
                         f"({', '.join(sorted(refused)[:5])}); edge-pack loads only those")
    try:
        est = sio.load(str(path), trusted=untrusted)
    except Exception as exc:
        raise ModelError(f"{path}: skops cannot load it: {_first_line(exc)}") from None
    features = getattr(est, "n_features_in_", None)
    if not isinstance(features, int | np.integer):
        raise ModelError(f"{path}: the estimator ({type(est).__name__}) is not fitted")
    task = "classifier" if hasattr(est, "predict_proba") and hasattr(est, "classes_") \
        else "regressor"
    if task == "classifier" and np.asarray(est.classes_).dtype.kind not in "iub":
        raise ModelError(f"{path}: class labels must be integers (got "
                         f"{np.asarray(est.classes_).dtype}); encode them before training")

    def predict(x: np.ndarray) -> dict[str, np.ndarray]:
        if task == "classifier":
            return {"label": np.asarray(est.predict(x)).astype(np.int64),
                    "probabilities": np.asarray(est.predict_proba(x), dtype=np.float64)}
        return {"variable": np.asarray(est.predict(x), dtype=np.float64).reshape(len(x), -1)}

    _need("skl2onnx", "scikit-learn")
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    try:
        model = to_onnx(est, initial_types=[(INPUT, FloatTensorType([None, int(features)]))],
                        target_opset={"": ONNX_OPSET, "ai.onnx.ml": ML_OPSET},
                        options={"zipmap": False} if task == "classifier" else None)
    except Exception as exc:
        raise ConversionError(f"{path}: skl2onnx cannot convert {type(est).__name__}: "
                              f"{_first_line(exc)}") from None
    return TreeModel("sklearn", task, int(features), model, predict)


def _as_outputs(task: str, out: np.ndarray) -> dict[str, np.ndarray]:
    """The library's raw predict as the ONNX outputs (binary: one probability column)."""
    if task == "regressor":
        return {"variable": out.astype(np.float64).reshape(len(out), -1)}
    prob = out.astype(np.float64)
    if prob.ndim == 1:
        prob = np.stack([1.0 - prob, prob], axis=1)
    return {"label": prob.argmax(axis=1).astype(np.int64), "probabilities": prob}


_LOADERS = {"xgboost": _load_xgboost, "lightgbm": _load_lightgbm, "sklearn": _load_sklearn}


# ----------------------------------------------------------------------------------- conversion

def _tidy(model: onnx.ModelProto, task: str) -> onnx.ModelProto:
    """Outputs named as documented, a default-domain opset import, a named batch dim."""
    want = ["label", "probabilities"] if task == "classifier" else ["variable"]
    outs = list(model.graph.output)
    if len(outs) != len(want):
        raise ConversionError(f"the converted model has outputs {[o.name for o in outs]}, "
                              f"expected {want}")
    for vi, name in zip(outs, want, strict=True):
        if vi.name != name:
            for node in model.graph.node:
                for i, o in enumerate(node.output):
                    if o == vi.name:
                        node.output[i] = name
                for i, o in enumerate(node.input):
                    if o == vi.name:
                        node.input[i] = name
            vi.name = name
    for vi in [*model.graph.input, *model.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if dims:  # some converters write a fixed 1 (LightGBM's label): every row is a sample
            dims[0].Clear()
            dims[0].dim_param = "batch"
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("", ONNX_OPSET))
    return model


def native_parity(tree: TreeModel, onnx_path: Path, rows: np.ndarray) -> dict[str, Any]:
    """Run the library and ONNX Runtime on ``rows``; max error and row agreement."""
    from packager.bundle.parity import onnxruntime_runner

    want = tree.predict(rows)
    got = onnxruntime_runner(onnx_path)({INPUT: rows})
    report: dict[str, Any] = {"rows": len(rows), "library": tree.kind, "task": tree.task}
    ok = np.ones(len(rows), dtype=bool)
    worst = 0.0
    for name, ref in want.items():
        if name not in got:
            raise ConversionError(f"the converted model has no output {name!r}")
        g = np.asarray(got[name])
        if name == "label":
            ok &= g.reshape(-1) == ref.reshape(-1)
            continue
        err = np.abs(g.astype(np.float64).reshape(ref.shape) - ref)
        worst = max(worst, float(err.max(initial=0.0)))
        ok &= (err <= PARITY_ATOL + PARITY_ATOL * np.abs(ref)).all(axis=1)
    agreement = float(ok.mean())
    report.update(max_abs_error=worst, row_agreement=agreement,
                  tolerance={"atol": PARITY_ATOL, "min_row_agreement": MIN_ROW_AGREEMENT},
                  passed=agreement >= MIN_ROW_AGREEMENT)
    return report


def split_thresholds(model: onnx.ModelProto) -> dict[int, np.ndarray]:
    """Feature index -> the sorted split thresholds of the model's tree ensembles."""
    from onnx import helper, numpy_helper

    found: dict[int, set[float]] = {}
    for node in model.graph.node:
        if node.domain != "ai.onnx.ml" or not node.op_type.startswith("TreeEnsemble"):
            continue
        attrs = {a.name: a for a in node.attribute}
        if "nodes_featureids" not in attrs:
            continue
        features = helper.get_attribute_value(attrs["nodes_featureids"])
        if "nodes_values" in attrs:
            values = list(helper.get_attribute_value(attrs["nodes_values"]))
        elif "nodes_values_as_tensor" in attrs:
            values = numpy_helper.to_array(attrs["nodes_values_as_tensor"].t).tolist()
        else:
            continue
        for f, v in zip(features, values, strict=False):
            found.setdefault(int(f), set()).add(float(v))
    return {f: np.array(sorted(v)) for f, v in found.items()}


def parity_rows(features: int, given: np.ndarray | None, model: onnx.ModelProto | None = None,
                seed: int = 20240601) -> np.ndarray:
    """Rows to compare on: the user's reference rows, else rows that walk the trees.

    Each feature of a generated row is, at random, a midpoint between two of its split
    thresholds or a value beyond the first or last one, so the rows take many paths through
    the trees and no value sits on a threshold (where float32 and float64 may differ).
    Features no tree splits on are 0; a model without readable thresholds gets normal noise.
    """
    if given is not None:
        return np.ascontiguousarray(given, dtype=np.float32)
    rng = np.random.default_rng(seed)
    thresholds = split_thresholds(model) if model is not None else {}
    if not thresholds:
        return rng.standard_normal((PARITY_ROWS, features)).astype(np.float32)
    rows = np.zeros((PARITY_ROWS, features), dtype=np.float32)
    for f, t in thresholds.items():
        if f >= features or not len(t):
            continue
        spread = max(float(t[-1] - t[0]), 1.0)
        points = np.concatenate([[t[0] - 0.5 * spread], (t[:-1] + t[1:]) / 2,
                                 [t[-1] + 0.5 * spread]])
        rows[:, f] = rng.choice(points, size=PARITY_ROWS)
    return rows


def convert_tree_model(path: Path, out: Path) -> TreeModel:
    """Load the model file at ``path`` with its library and write its ONNX-ML form to ``out``."""
    path = Path(path)
    kind = tree_kind(path)
    if kind is None:
        raise ModelError(f"{path}: not a tree model file (.json/.ubj XGBoost, .txt LightGBM, "
                         ".skops scikit-learn)")
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    tree = _LOADERS[kind](path)
    tree.model = _tidy(tree.model, tree.task)
    tree.toolchain = _versions(kind)
    onnx.save(tree.model, str(out))
    return tree


def check_native(tree: TreeModel, onnx_path: Path, source: Path, *, allow_parity_failure: bool,
                 given_rows: np.ndarray | None = None) -> dict[str, Any]:
    """The library-vs-ONNX report (``parity.native`` in the manifest); ParityError when rows
    disagree, unless ``allow_parity_failure``."""
    report = native_parity(tree, onnx_path, parity_rows(tree.features, given_rows, tree.model))
    report["inputs"] = ("reference data" if given_rows is not None else
                        "seeded rows between the split thresholds")
    if not report["passed"] and not allow_parity_failure:
        raise ParityError(f"{source}: the ONNX form of this {tree.kind} {tree.task} agrees with "
                          f"{tree.kind}'s own predictions on {report['row_agreement']:.1%} of "
                          f"{report['rows']} rows (max error {report['max_abs_error']:.3g}; "
                          f"needs {MIN_ROW_AGREEMENT:.0%}); pass --allow-parity-failure to "
                          "build anyway")
    return report


def has_ml_ops(model: onnx.ModelProto) -> list[str]:
    """The ai.onnx.ml op types in ``model`` (OpenVINO and TensorRT have none of them)."""
    return sorted({n.op_type for n in model.graph.node if n.domain == "ai.onnx.ml"})
