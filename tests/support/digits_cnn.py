"""A small CNN trained on scikit-learn's bundled digits (8x8 images, 10 classes) with numpy.

Trained at test time (a few seconds on one core, deterministic for a seed) and exported with
``onnx.helper``: Conv-Relu-Conv-Relu-MaxPool-Flatten-Gemm-Relu-Gemm, input ``image``
[batch, 1, 8, 8] float32 (pixels scaled to 0..1), output ``logits`` [batch, 10]. A trained
model, not random weights, so int8 accuracy and top-1 agreement mean something.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

INPUT = "image"
OUTPUT = "logits"


@dataclass(frozen=True)
class DigitsData:
    """The digits split in three: training rows, calibration rows, test rows."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_calib: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits_split(seed: int = 0, upscale: int = 1) -> DigitsData:
    """Digits as float32 [N, 1, 8*upscale, 8*upscale] in 0..1: 1200 train, 200 calibration,
    the rest test (``upscale`` repeats pixels, for a benchmark with more work per image)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None, :, :]
    if upscale > 1:
        x = np.ascontiguousarray(x.repeat(upscale, axis=2).repeat(upscale, axis=3))
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    return DigitsData(x[:1200], y[:1200], x[1200:1400], x[1400:], y[1400:])


def _im2col(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = sliding_window_view(xp, (3, 3), axis=(2, 3))  # N, C, H, W, 3, 3
    return np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(n * h * w, c * 9)


def _col2im(dcols: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, 3, 3)
    dxp = np.zeros((n, c, h + 2, w + 2), dtype=dcols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + w] += d[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dxp[:, :, 1:-1, 1:-1]


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, _, h, wd = x.shape
    cols = _im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def _conv_back(dout: np.ndarray, cols: np.ndarray, w: np.ndarray,
               x_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    f = w.shape[0]
    d = dout.transpose(0, 2, 3, 1).reshape(-1, f)
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(axis=0)
    dx = _col2im(d @ w.reshape(f, -1), x_shape)
    return dx, dw, db


class DigitsCnn:
    """The weights and a numpy forward/backward pass (training only; serving runs the ONNX)."""

    def __init__(self, seed: int, channels: int = 16, hidden: int = 64, side: int = 8) -> None:
        rng = np.random.default_rng(seed)

        def he(*shape: int) -> np.ndarray:
            fan_in = int(np.prod(shape[1:]))
            return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

        self.side = (side, side)
        self.p: dict[str, np.ndarray] = {
            "w1": he(channels, 1, 3, 3), "b1": np.zeros(channels, np.float32),
            "w2": he(channels, channels, 3, 3), "b2": np.zeros(channels, np.float32),
            "w3": he(hidden, channels * (side // 2) ** 2).T.copy(),
            "b3": np.zeros(hidden, np.float32),
            "w4": he(10, hidden).T.copy(), "b4": np.zeros(10, np.float32),
        }

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Forward pass (float32 logits)."""
        return self._forward(x)[0]

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        p = self.p
        c1, cols1 = _conv(x, p["w1"], p["b1"])
        a1 = np.maximum(c1, 0)
        c2, cols2 = _conv(a1, p["w2"], p["b2"])
        a2 = np.maximum(c2, 0)
        n, c, h, w = a2.shape
        blocks = a2.reshape(n, c, h // 2, 2, w // 2, 2)
        pooled = blocks.max(axis=(3, 5))
        flat = pooled.reshape(n, -1)
        hid = np.maximum(flat @ p["w3"] + p["b3"], 0)
        z = hid @ p["w4"] + p["b4"]
        cache = {"x": x, "c1": c1, "cols1": cols1, "a1": a1, "c2": c2, "cols2": cols2,
                 "a2": a2, "pooled": pooled, "flat": flat, "hid": hid}
        return z, cache

    def step(self, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        """Gradients of the mean softmax cross-entropy over the batch."""
        p = self.p
        z, k = self._forward(x)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        prob = e / e.sum(axis=1, keepdims=True)
        prob[np.arange(len(y)), y] -= 1
        dz = prob / len(y)
        g: dict[str, np.ndarray] = {"w4": k["hid"].T @ dz, "b4": dz.sum(axis=0)}
        dh = (dz @ p["w4"].T) * (k["hid"] > 0)
        g["w3"], g["b3"] = k["flat"].T @ dh, dh.sum(axis=0)
        dpool = (dh @ p["w3"].T).reshape(k["pooled"].shape)
        up = np.repeat(np.repeat(k["pooled"], 2, axis=2), 2, axis=3)
        da2 = np.repeat(np.repeat(dpool, 2, axis=2), 2, axis=3) * (k["a2"] == up)
        dc2 = da2 * (k["c2"] > 0)
        da1, g["w2"], g["b2"] = _conv_back(dc2, k["cols2"], p["w2"], k["a1"].shape)
        dc1 = da1 * (k["c1"] > 0)
        _, g["w1"], g["b1"] = _conv_back(dc1, k["cols1"], p["w1"], k["x"].shape)
        return g


def train_digits_cnn(data: DigitsData, seed: int = 0, epochs: int = 8,
                     batch: int = 32, lr: float = 3e-3, channels: int = 8) -> DigitsCnn:
    """Train with Adam on ``data.x_train``; deterministic for ``seed`` (~10 s on one core).

    BLAS runs on one thread: its threads fighting over a busy 2-core machine made a step 7x
    slower."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _train(data, seed, epochs, batch, lr, channels)


def _train(data: DigitsData, seed: int, epochs: int, batch: int, lr: float,
           channels: int) -> DigitsCnn:
    net = DigitsCnn(seed, channels=channels, side=data.x_train.shape[-1])
    rng = np.random.default_rng(seed + 1)
    m = {k: np.zeros_like(v) for k, v in net.p.items()}
    v = {k: np.zeros_like(a) for k, a in net.p.items()}
    t = 0
    for _ in range(epochs):
        order = rng.permutation(len(data.x_train))
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            g = net.step(data.x_train[idx], data.y_train[idx])
            t += 1
            for key, grad in g.items():
                m[key] = 0.9 * m[key] + 0.1 * grad
                v[key] = 0.999 * v[key] + 0.001 * grad * grad
                mh = m[key] / (1 - 0.9 ** t)
                vh = v[key] / (1 - 0.999 ** t)
                net.p[key] = (net.p[key] - lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
    return net


def export_onnx(net: DigitsCnn, path: Path, opset: int = 17) -> Path:
    """Write the network as an ONNX model with a dynamic batch dimension."""
    p = net.p
    inits = [numpy_helper.from_array(np.ascontiguousarray(a, dtype=np.float32), k)
             for k, a in p.items()]
    nodes = [
        helper.make_node("Conv", [INPUT, "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["a1"]),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["a2"]),
        helper.make_node("MaxPool", ["a2"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "w3", "b3"], ["g3"]),
        helper.make_node("Relu", ["g3"], ["hid"]),
        helper.make_node("Gemm", ["hid", "w4", "b4"], [OUTPUT]),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT,
                                       ["batch", 1, *net.side])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Share of rows whose arg-max is the label."""
    return float((logits.argmax(axis=1) == labels).mean())
