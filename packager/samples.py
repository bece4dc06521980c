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
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="edge-toolkit-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, path)
    return path
