"""A real ONNX model whose run time the caller chooses (built with onnx.helper, no downloads).

``make_spin_model``: ``probs = input @ W`` (FP32 [batch, 64] -> [batch, 10], like the sample MLP)
plus a Loop of ``int(max(input))`` trips (none for inputs below 1): ``spin_input(trips)`` holds
one such request. A run of many trips is an execution that takes as long as the test needs, on
ONNX Runtime and OpenVINO alike, and stops on its own (unlike a hang).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.support.models import IN, OUT, save_model


def make_spin_model(path: Path) -> Path:
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
                 np.random.default_rng(11).standard_normal((IN, OUT)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(True), "go")]
    nodes = [helper.make_node("ReduceMax", ["input"], ["mx"], keepdims=0),
             helper.make_node("Relu", ["mx"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["trips"], to=TensorProto.INT64),
             helper.make_node("Loop", ["trips", "go", "zero"], ["acc"], body=body),
             helper.make_node("Mul", ["acc", "zero"], ["nil"]),
             helper.make_node("MatMul", ["input", "w"], ["m"]),
             helper.make_node("Add", ["m", "nil"], ["probs"])]
    return save_model(nodes, inits, path, "spin")


def spin_input(trips: int = 0) -> np.ndarray:
    """One request ([1, 64]) whose run makes ``trips`` Loop trips (0: a plain fast run)."""
    x = np.zeros((1, IN), np.float32)
    x[0, 0] = trips
    return x
