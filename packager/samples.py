"""Sample models the toolkit generates itself (no downloads): the demo's embedded default.

The MLP has seeded random weights, so its outputs depend on its inputs: right for parity checks
and for checking that each caller gets its own rows back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_mlp(
    path: Path | str,
    *,
    in_features: int = 64,
    hidden: int = 128,
    out_features: int = 10,
    seed: int = 0,
    dynamic_batch: bool = True,
    opset: int = 17,
) -> Path:
    """Write a two-layer MLP (Gemm-Relu-Gemm-Softmax) with seeded random weights to ``path``.

    Input ``input`` is FP32 [batch, in_features]; output ``probs`` is FP32 [batch, out_features].
    """
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((in_features, hidden)).astype(np.float32) * 0.2
    b1 = rng.standard_normal(hidden).astype(np.float32) * 0.1
    w2 = rng.standard_normal((hidden, out_features)).astype(np.float32) * 0.2
    b2 = rng.standard_normal(out_features).astype(np.float32) * 0.1
    batch: str | int = "batch" if dynamic_batch else 1
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["input", "w1", "b1"], ["h"], name="fc1"),
            helper.make_node("Relu", ["h"], ["hr"], name="relu"),
            helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"], name="fc2"),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
        ],
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, in_features])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, out_features])],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    return _save(graph, path, opset, producer="edge-toolkit-tests")


def _save(graph: onnx.GraphProto, path: Path | str, opset: int, *, producer: str) -> Path:
    """Check the model made of ``graph`` (IR 8, ``opset``) and write it to ``path``."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name=producer)
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, path)
    return path


def make_cnn(
    path: Path | str,
    *,
    calibration: Path | str | None = None,
    samples: int = 200,
    size: int = 16,
    classes: int = 10,
    seed: int = 0,
    opset: int = 17,
) -> Path:
    """Write a small image classifier (Conv-Relu-Conv-Relu-GlobalAveragePool-Gemm) to ``path``.

    Input ``image`` is FP32 [batch, 1, size, size]; output ``logits`` is FP32 [batch, classes].
    The weights are seeded and the last layer is set so that ``classes`` seeded prototype images
    land on their own class with a wide margin; with ``calibration``, ``samples`` noisy copies of
    the prototypes (pixels in 0..1) are written there as an .npz holding one array, ``image``,
    for ``edge-pack build --calibration-data``.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.5
    b1 = np.zeros(8, np.float32)
    w2 = rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2
    b2 = np.zeros(16, np.float32)
    prototypes = rng.uniform(0.0, 1.0, (classes, 1, size, size)).astype(np.float32)

    def features(x: np.ndarray) -> np.ndarray:
        h = np.maximum(_conv(x, w1, b1, stride=1), 0.0)
        h = np.maximum(_conv(h, w2, b2, stride=2), 0.0)
        return np.asarray(h.mean(axis=(2, 3)), np.float32)

    # the last layer separates the prototypes' features: least squares onto scaled one-hots
    f = features(prototypes)
    f = np.concatenate([f - f.mean(0), np.ones((classes, 1), np.float32)], axis=1)
    target = np.eye(classes, dtype=np.float32) * 10.0
    sol = np.linalg.lstsq(f, target, rcond=None)[0]
    mean = features(prototypes).mean(0)
    w3 = sol[:-1].astype(np.float32)
    b3 = (sol[-1] - mean @ sol[:-1]).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                             name="conv1"),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
            helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                             strides=[2, 2], name="conv2"),
            helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
            helper.make_node("GlobalAveragePool", ["r2"], ["pool"], name="pool"),
            helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
            helper.make_node("Gemm", ["flat", "w3", "b3"], ["logits"], name="fc"),
        ],
        "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        initializer=[numpy_helper.from_array(a, n) for a, n in
                     ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3"), (b3, "b3"))],
    )
    path = _save(graph, path, opset, producer="edge-toolkit-samples")
    if calibration is not None:
        labels = rng.integers(0, classes, samples)
        noise = rng.normal(0.0, 0.05, (samples, 1, size, size)).astype(np.float32)
        images = np.clip(prototypes[labels] + noise, 0.0, 1.0).astype(np.float32)
        np.savez(calibration, image=images)
    return path


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, *, stride: int) -> np.ndarray:
    """A 3x3 convolution with padding 1 (ONNX Conv's layout), for make_cnn's last layer fit."""
    from numpy.lib.stride_tricks import sliding_window_view

    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.asarray(np.einsum("ncijkl,ockl->noij", win, w) + b[None, :, None, None],
                      np.float32)


TREE_LIBRARIES = ("xgboost", "lightgbm", "sklearn")


def make_tree_model(path: Path | str, library: str, *, rows: int = 600, features: int = 12,
                    rounds: int = 20, seed: int = 0) -> Path:
    """Train a binary classifier of ``library`` on seeded synthetic rows and save it to ``path``
    the way that library saves it: XGBoost ``.json``/``.ubj``, LightGBM ``.txt``, a
    scikit-learn random forest as ``.skops``. Needs the ``[trees]`` extra."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    y = ((x[:, 0] + x[:, 1] * x[:, 2] - 0.5 * x[:, 3]) > 0).astype(np.int64)
    path = Path(path)
    if library == "xgboost":
        import xgboost as xgb

        booster = xgb.XGBClassifier(n_estimators=rounds, max_depth=4, n_jobs=1,
                                    random_state=seed)
        booster.fit(x, y)
        booster.save_model(str(path))
    elif library == "lightgbm":
        import lightgbm as lgb

        gbm = lgb.LGBMClassifier(n_estimators=rounds, num_leaves=15, n_jobs=1,
                                 random_state=seed, verbose=-1)
        gbm.fit(x, y)
        gbm.booster_.save_model(str(path))
    elif library == "sklearn":
        import skops.io as sio
        from sklearn.ensemble import RandomForestClassifier

        forest = RandomForestClassifier(n_estimators=rounds, max_depth=6, n_jobs=1,
                                        random_state=seed)
        forest.fit(x, y)
        sio.dump(forest, path)
    else:
        raise ValueError(f"no tree sample for {library!r}; one of {', '.join(TREE_LIBRARIES)}")
    return path
