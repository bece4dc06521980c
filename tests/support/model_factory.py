"""Real ONNX models for tests and benchmarks, built with onnx.helper (no downloads).

The MLP has random weights, so its outputs depend on its inputs: right for parity checks and
for "each caller gets its own rows". The light CNNs the onnx package ships are right for shapes,
conversion coverage and speed (their weights are constant fills).

Their constant fills also make them useless for parity: squeezenet's logits are ~6.8e9 and
identical, so a runtime that differs from ONNX Runtime by a few ulps there (OpenVINO with
AVX-512 kernels does) turns the uniform softmax into a peaked one. Tests that compare a
CNN's served outputs with the source use ``conditioned_light_model`` (same graph, weights
that keep activations small); builds of the shipped light CNNs pass ``LIGHT_BUILD``
(``allow_parity_failure=True``); parity itself is tested on the MLP.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from packager.samples import make_mlp

__all__ = ["LIGHT_BUILD", "LIGHT_MODELS", "conditioned_light_model", "light_model_path", "make_mlp",
           "varied_light_model"]

LIGHT_BUILD: dict[str, bool] = {"allow_parity_failure": True}
"""``build_bundles`` keywords for a light CNN (see the module docstring)."""

LIGHT_MODELS = ("squeezenet", "shufflenet", "resnet50", "inception_v1", "densenet121")


def light_model_path(name: str) -> Path:
    """Path of one of the light CNNs in the installed onnx package (e.g. ``squeezenet``)."""
    base = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
    path = base / f"light_{name}.onnx"
    if not path.exists():
        raise FileNotFoundError(f"{path} is not in the installed onnx package")
    return path


def conditioned_light_model(name: str, out_dir: Path) -> Path:
    """A copy of light CNN ``name`` whose conv weights average their inputs (1 / fan-in).

    Same graph, ops and speed as the shipped model (its weights are ``ConstantOfShape`` fills of
    0.02), but activations stay near the input's scale instead of reaching ~1e10, so runtimes
    agree to float precision and outputs can be compared with the source (module docstring).
    """
    import numpy as np
    from onnx import numpy_helper

    model = onnx.load(str(light_model_path(name)))
    weights = {n.input[1] for n in model.graph.node if n.op_type == "Conv" and len(n.input) > 1}
    shapes = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.output[0] in weights:
            fan_in = int(np.prod(shapes[node.input[0]][1:]))
            value = numpy_helper.from_array(np.array([1.0 / fan_in], dtype=np.float32))
            for attr in node.attribute:
                if attr.name == "value":
                    attr.t.CopyFrom(value)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"conditioned_{name}.onnx"
    onnx.save(model, str(path))
    return path


def varied_light_model(name: str, out_dir: Path, seed: int = 0) -> Path:
    """A copy of light CNN ``name`` whose conv weights are seeded random (He-scaled: activations
    keep their scale), so that different images get different top classes.

    ``conditioned_light_model`` gives every output channel the same weights, so its softmax is
    uniform: right for parity of values, useless for labels (top-k is always 0, 1, 2, ...).
    """
    import numpy as np
    from onnx import numpy_helper

    model = onnx.load(str(light_model_path(name)))
    weights = {n.input[1] for n in model.graph.node if n.op_type == "Conv" and len(n.input) > 1}
    shapes = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    kept = []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.output[0] in weights:
            shape = [int(d) for d in shapes[node.input[0]]]
            fan_in = int(np.prod(shape[1:]))
            value = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
            model.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
            # this IR version lists initializers among the graph's inputs
            model.graph.input.append(onnx.helper.make_tensor_value_info(
                node.output[0], onnx.TensorProto.FLOAT, shape))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    used = {i for n in kept for i in n.input}
    unused = [i for i in model.graph.initializer if i.name not in used
              and i.name not in weights]
    for init in unused:  # the dropped fills' shapes (initializers listed as inputs too)
        model.graph.initializer.remove(init)
    for inp in [i for i in model.graph.input if i.name in {u.name for u in unused}]:
        model.graph.input.remove(inp)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"varied_{name}.onnx"
    onnx.save(model, str(path))
    return path


def padded_light_model(name: str, out_dir: Path, pad_mib: float) -> Path:
    """A copy of light CNN ``name`` that holds ``pad_mib`` MiB more weights, every byte read by
    each inference as a real CNN's are: a 1x1 convolution (1024 input channels) of a vector
    computed from the input (always zeros), whose largest output (0) is added to the output,
    so no runtime can fold it away. Same outputs as the source.
    """
    import numpy as np
    from onnx import helper, numpy_helper

    model = onnx.load(str(light_model_path(name)))
    graph = model.graph
    width = 1024
    table = np.full((max(1, int(pad_mib * (1 << 20)) // (4 * width)), width, 1, 1), 0.5,
                    np.float32)
    graph.initializer.append(numpy_helper.from_array(table, "pad_table"))
    graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "pad_zero"))
    graph.initializer.append(numpy_helper.from_array(np.array([1, width, 1, 1], np.int64),
                                                     "pad_shape"))
    if model.ir_version < 4:  # this IR version lists initializers among the graph's inputs
        for init in ("pad_table", "pad_zero", "pad_shape"):
            t = next(i for i in graph.initializer if i.name == init)
            graph.input.append(helper.make_tensor_value_info(init, t.data_type, list(t.dims)))
    out = graph.output[0].name
    weights = {i.name for i in graph.initializer}
    data = next(i.name for i in graph.input if i.name not in weights)
    for node in graph.node:
        node.output[:] = [o if o != out else "pad_pre" for o in node.output]
    graph.node.extend([
        helper.make_node("Mul", [data, "pad_zero"], ["pad_zeros"]),
        helper.make_node("ReduceMax", ["pad_zeros"], ["pad_max"], keepdims=1),
        helper.make_node("Expand", ["pad_max", "pad_shape"], ["pad_vector"]),
        helper.make_node("Conv", ["pad_vector", "pad_table"], ["pad_conv"]),
        helper.make_node("ReduceMax", ["pad_conv"], ["pad_entry"], keepdims=0),
        helper.make_node("Add", ["pad_pre", "pad_entry"], [out]),
    ])
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"padded_{name}_{pad_mib:g}.onnx"
    onnx.save(model, str(path))
    return path
