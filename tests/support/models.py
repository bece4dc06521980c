"""Small ONNX models that misbehave in chosen ways (built with onnx.helper, no downloads).

- ``make_nan_model``: answers every request with NaN (fails the health probe).
- ``make_fragile_model``: fine for inputs in [-20, 20] (warm-up and probe pass), but a request
  holding a value >= 21 fails in ONNX Runtime (Gather index out of range): a version whose
  error rate under real traffic triggers the automatic rollback.
Both take ``input`` FP32 [batch, 64] and give ``probs`` FP32 [batch, 10], like the sample MLP.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IN, OUT = 64, 10


def save_model(nodes: list, inits: list, path: Path, name: str = "misbehaving") -> Path:
    """An ONNX model ``input`` FP32 [batch, 64] -> ``probs`` FP32 [batch, 10] of ``nodes``,
    checked and saved to ``path``."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", IN])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", OUT])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return Path(path)


def make_nan_model(path: Path) -> Path:
    """probs = sqrt(-(|x W| + 1)): NaN for every input."""
    w = numpy_helper.from_array(np.full((IN, OUT), 0.01, np.float32), "w")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    nodes = [helper.make_node("MatMul", ["input", "w"], ["m"]),
             helper.make_node("Abs", ["m"], ["a"]),
             helper.make_node("Add", ["a", "one"], ["p"]),
             helper.make_node("Neg", ["p"], ["n"]),
             helper.make_node("Sqrt", ["n"], ["probs"])]
    return save_model(nodes, [w, one], path)


def make_fragile_model(path: Path) -> Path:
    """probs = sum over features of table[int(x)]: Gather fails for |x| >= 21."""
    table = numpy_helper.from_array(
        np.random.default_rng(5).standard_normal((21, OUT)).astype(np.float32), "table")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Cast", ["input"], ["idx"], to=TensorProto.INT64),
             helper.make_node("Gather", ["table", "idx"], ["g"], axis=0),
             helper.make_node("ReduceSum", ["g", "axes"], ["probs"], keepdims=0)]
    return save_model(nodes, [table, axes], path)
