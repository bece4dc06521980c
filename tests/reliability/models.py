"""A real ONNX model that hangs on demand (built with onnx.helper, no downloads).

``make_hang_model``: ``probs = input @ W`` (FP32 [batch, 64] -> [batch, 10], like the sample MLP),
plus a Loop whose trip count is 0 unless some input value is >= 100, when it is 10^15: warm-up
and the health probe pass, and one "hot" request keeps ONNX Runtime busy for days (a hung
backend, cancellable only through ONNX Runtime's RunOptions.terminate).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.support.models import IN, OUT, save_model

HOT = 100.0  # an input value at or above this hangs the model


def make_hang_model(path: Path) -> Path:
    """Write the model to ``path`` and return it."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "spin",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    inits = [numpy_helper.from_array(
                 np.random.default_rng(5).standard_normal((IN, OUT)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(10**15, np.int64), "big"),
             numpy_helper.from_array(np.array(HOT, np.float32), "hot"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(True), "go")]
    nodes = [helper.make_node("ReduceMax", ["input"], ["mx"], keepdims=0),
             helper.make_node("GreaterOrEqual", ["mx", "hot"], ["is_hot"]),
             helper.make_node("Cast", ["is_hot"], ["hot_i"], to=TensorProto.INT64),
             helper.make_node("Mul", ["hot_i", "big"], ["trips"]),
             helper.make_node("Loop", ["trips", "go", "zero"], ["acc"], body=body),
             helper.make_node("Mul", ["acc", "zero"], ["nil"]),
             helper.make_node("MatMul", ["input", "w"], ["m"]),
             helper.make_node("Add", ["m", "nil"], ["probs"])]
    return save_model(nodes, inits, path, "hang")
