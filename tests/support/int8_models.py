"""Common model shapes for the int8 tests, trained (or read out) on scikit-learn's digits.

- :func:`sklearn_mlp`: an ``MLPClassifier`` exported by skl2onnx (MatMul + Add per layer, a
  Softmax, and ai.onnx.ml ops that turn the argmax into a label), as scikit-learn users ship;
- :func:`gemm_mlp`: the same trained weights in the form PyTorch's exporter writes for
  ``nn.Linear`` on 2-D inputs (``Gemm`` with ``transB = 1`` and a bias);
- :func:`encoder_block`: one transformer encoder block (token embedding, two-head self
  attention, LayerNormalization, a ReLU feed-forward, residuals, mean pooling) whose random
  weights feed a classifier head fitted on its fp32 features, so top-1 means something.

Inputs are float32 [batch, 64] (the 8x8 pixels scaled to 0..1); every model answers logits or
probabilities [batch, 10].
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass(frozen=True)
class FlatDigits:
    """Digits as [N, 64] float32: training, calibration and test rows."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_calib: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def flat_digits(seed: int = 0) -> FlatDigits:
    """1200 training rows, 200 calibration rows, the rest (397) for testing."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], d.target[order]
    return FlatDigits(x[:1200], y[:1200], x[1200:1400], x[1400:], y[1400:])


def _model(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], output: str,
           classes: int = 10) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "int8_case",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", classes])],
        [numpy_helper.from_array(v.astype(np.float32) if v.dtype != np.int64 else v, k)
         for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def train_mlp(data: FlatDigits):  # type: ignore[no-untyped-def]
    """A trained scikit-learn MLPClassifier (64 -> 64 -> 32 -> 10)."""
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(hidden_layer_sizes=(64, 32), max_iter=400,
                         random_state=0).fit(data.x_train, data.y_train)


def sklearn_mlp(path: Path, clf) -> Path:  # type: ignore[no-untyped-def]
    """``clf`` exported by skl2onnx (probabilities, no ZipMap), at ``path``."""
    from skl2onnx import to_onnx

    onx = to_onnx(clf, np.zeros((1, 64), np.float32),
                  options={id(clf): {"zipmap": False}}, target_opset={"": OPSET, "ai.onnx.ml": 3})
    path.write_bytes(onx.SerializeToString())
    return path


def gemm_mlp(path: Path, clf) -> Path:  # type: ignore[no-untyped-def]
    """``clf``'s weights as PyTorch's exporter writes ``nn.Linear``: Gemm(transB=1) + bias."""
    nodes, inits, last = [], {}, "x"
    layers = len(clf.coefs_)
    for i, (w, b) in enumerate(zip(clf.coefs_, clf.intercepts_, strict=True)):
        inits[f"fc{i}.weight"], inits[f"fc{i}.bias"] = w.T.copy(), b
        out = "logits" if i == layers - 1 else f"g{i}"
        nodes.append(helper.make_node("Gemm", [last, f"fc{i}.weight", f"fc{i}.bias"], [out],
                                      transB=1))
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [out], [f"h{i}"]))
            last = f"h{i}"
    onnx.save(_model(nodes, inits, "logits"), str(path))
    return path


def _encoder_nodes(rng: np.random.Generator) -> tuple[list[onnx.NodeProto],
                                                       dict[str, np.ndarray]]:
    """x [B, 64] -> pooled [B, 32]: 8 tokens of 8 pixels, one encoder block."""
    d, heads, tokens = 32, 2, 8
    hd = d // heads

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[0])).astype(np.float32)

    inits: dict[str, np.ndarray] = {
        "tok_shape": np.array([-1, tokens, 8], np.int64),
        "heads_shape": np.array([0, tokens, heads, hd], np.int64),
        "merge_shape": np.array([0, tokens, d], np.int64),
        "embed.w": w(8, d, scale=2.0), "embed.b": np.zeros(d, np.float32),
        "pos": (rng.standard_normal((tokens, d)) * 0.5).astype(np.float32),
        "q.w": w(d, d), "k.w": w(d, d), "v.w": w(d, d), "o.w": w(d, d),
        "o.b": np.zeros(d, np.float32),
        "ln1.g": np.ones(d, np.float32), "ln1.b": np.zeros(d, np.float32),
        "ln2.g": np.ones(d, np.float32), "ln2.b": np.zeros(d, np.float32),
        "ff1.w": w(d, 2 * d), "ff1.b": np.zeros(2 * d, np.float32),
        "ff2.w": w(2 * d, d), "ff2.b": np.zeros(d, np.float32),
        "scale": np.array(1.0 / np.sqrt(hd), np.float32),
    }
    n = helper.make_node
    nodes = [
        n("Reshape", ["x", "tok_shape"], ["tok"]),
        n("MatMul", ["tok", "embed.w"], ["e0"]), n("Add", ["e0", "embed.b"], ["e1"]),
        n("Add", ["e1", "pos"], ["h0"]),
        n("LayerNormalization", ["h0", "ln1.g", "ln1.b"], ["a0"], axis=-1),
        *[n("MatMul", ["a0", f"{p}.w"], [p]) for p in ("q", "k", "v")],
        *[n("Reshape", [p, "heads_shape"], [f"{p}4"]) for p in ("q", "k", "v")],
        n("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qh", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
        n("Softmax", ["s1"], ["p"], axis=-1),
        n("MatMul", ["p", "vh"], ["c0"]),
        n("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["c1", "merge_shape"], ["c2"]),
        n("MatMul", ["c2", "o.w"], ["o0"]), n("Add", ["o0", "o.b"], ["o1"]),
        n("Add", ["h0", "o1"], ["h1"]),
        n("LayerNormalization", ["h1", "ln2.g", "ln2.b"], ["f0"], axis=-1),
        n("MatMul", ["f0", "ff1.w"], ["f1"]), n("Add", ["f1", "ff1.b"], ["f2"]),
        n("Relu", ["f2"], ["f3"]),
        n("MatMul", ["f3", "ff2.w"], ["f4"]), n("Add", ["f4", "ff2.b"], ["f5"]),
        n("Add", ["h1", "f5"], ["h2"]),
        n("ReduceMean", ["h2"], ["pooled"], axes=[1], keepdims=0),
    ]
    return nodes, inits


def encoder_block(path: Path, data: FlatDigits, seed: int = 0) -> Path:
    """One encoder block with a classifier head fitted on its fp32 features, at ``path``."""
    import onnxruntime as ort
    from sklearn.linear_model import LogisticRegression

    nodes, inits = _encoder_nodes(np.random.default_rng(seed))
    features = _model(nodes, inits, "pooled", classes=32)
    session = ort.InferenceSession(features.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    pooled = session.run(None, {"x": data.x_train})[0]
    head = LogisticRegression(max_iter=2000, C=1.0).fit(pooled, data.y_train)
    inits["head.weight"] = head.coef_.astype(np.float32)
    inits["head.bias"] = head.intercept_.astype(np.float32)
    nodes.append(helper.make_node("Gemm", ["pooled", "head.weight", "head.bias"], ["logits"],
                                  transB=1))
    onnx.save(_model(nodes, inits, "logits"), str(path))
    return path
