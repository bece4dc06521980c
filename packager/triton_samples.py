"""ONNX models with the names and signatures Triton's example clients expect (no downloads).

Triton's client repository ships example programs (``src/python/examples``) that talk to models
named ``simple``, ``simple_string``, ``simple_int8``, ``simple_identity``, ``simple_sequence``,
``densenet_onnx`` and so on. :func:`write_triton_example_models` writes ONNX sources for the ones
an ONNX graph can express, so ``edge-pack`` can build them and the examples can run unchanged
against an agent (``benchmarks/triton_examples.py`` does; docs/compatibility.md records it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from packager.samples import _save

#: Width of the ``simple`` family's tensors (Triton's examples send [1, 16]).
SIMPLE_WIDTH = 16


STAGES = ("base", "late", "ensemble")
"""When the harness deploys a model (benchmarks/triton_examples.py): ``base`` first; ``late``
after the HTTP model control example, which counts 7 models in the repository (the gRPC one
counts 8); ``ensemble`` (the ensemble example's three models) last, after both."""


@dataclass(frozen=True)
class ExampleModel:
    """One source (an ONNX model or a spec) for a Triton example model and how ``edge-pack
    build`` should build it; ``stage``: one of :data:`STAGES`."""

    name: str
    source: Path
    max_batch: int | None = 8
    labels: Path | None = None
    build_args: tuple[str, ...] = field(default_factory=tuple)
    stage: str = "base"


def make_add_sub(path: Path | str, *, dtype: int = TensorProto.INT32, width: int = SIMPLE_WIDTH,
                 opset: int = 17) -> Path:
    """Write Triton's ``simple``: INPUT0, INPUT1 [batch, width] -> OUTPUT0 sum, OUTPUT1 difference.

    ``dtype`` is INT32 (``simple``), INT8 (``simple_int8``; computed in INT32 and cast back) or
    STRING (``simple_string``: decimal strings, parsed and formatted by Cast).
    """
    nodes = []
    a, b = "INPUT0", "INPUT1"
    if dtype != TensorProto.INT32:
        nodes += [helper.make_node("Cast", ["INPUT0"], ["a32"], to=TensorProto.INT32),
                  helper.make_node("Cast", ["INPUT1"], ["b32"], to=TensorProto.INT32)]
        a, b = "a32", "b32"
    sum_name, diff_name = ("OUTPUT0", "OUTPUT1") if dtype == TensorProto.INT32 else ("s", "d")
    nodes += [helper.make_node("Add", [a, b], [sum_name]),
              helper.make_node("Sub", [a, b], [diff_name])]
    if dtype != TensorProto.INT32:
        nodes += [helper.make_node("Cast", ["s"], ["OUTPUT0"], to=dtype),
                  helper.make_node("Cast", ["d"], ["OUTPUT1"], to=dtype)]
    shape: list[str | int] = ["batch", width]
    graph = helper.make_graph(
        nodes, "simple",
        [helper.make_tensor_value_info(n, dtype, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, dtype, shape) for n in ("OUTPUT0", "OUTPUT1")])
    return _save(graph, path, opset, producer="edge-toolkit-triton-examples")


def make_identity(path: Path | str, *, dtype: int, inputs: str = "INPUT0",
                  outputs: str = "OUTPUT0", width: int | str = SIMPLE_WIDTH,
                  opset: int = 17) -> Path:
    """Write an identity model ``inputs`` [batch, width] -> ``outputs`` of ``dtype``.

    Triton's ``simple_identity`` (BYTES) and ``custom_identity_int32`` (INT32).
    """
    shape: list[str | int] = ["batch", width]
    graph = helper.make_graph(
        [helper.make_node("Identity", [inputs], [outputs])], "identity",
        [helper.make_tensor_value_info(inputs, dtype, shape)],
        [helper.make_tensor_value_info(outputs, dtype, shape)])
    return _save(graph, path, opset, producer="edge-toolkit-triton-examples")


SEQUENCE_FLAGS = ("--sequence", "oldest", "--control-input", "START=START:INT32",
                  "--control-input", "READY=READY:INT32")
"""``edge-pack build`` flags of :func:`make_sequence`'s model (add END and CORRID for dyna)."""

DYNA_FLAGS = (*SEQUENCE_FLAGS, "--control-input", "END=END:INT32",
              "--control-input", "CORRID=CORRID:UINT64")


def make_sequence(path: Path | str, *, dyna: bool = False, opset: int = 17) -> Path:
    """Write the signature Triton's sequence examples expect of ``simple_sequence``: INT32
    ``INPUT`` [batch, 1] -> ``OUTPUT``, with INT32 control inputs ``START`` and ``READY``
    (filled by the agent): ``OUTPUT = (INPUT + START) * READY``, the answers the examples
    check (their first request answers its value plus one, the others their value).

    ``dyna`` (``simple_dyna_sequence``): also INT32 ``END`` and UINT64 ``CORRID``, and the
    last request of a sequence adds its correlation id, as Triton's dyna_sequence does."""
    i32 = TensorProto.INT32
    names = ["INPUT", "START", "READY", *(["END"] if dyna else [])]
    nodes = [helper.make_node("Add", ["INPUT", "START"], ["started"])]
    total = "started"
    if dyna:
        nodes += [helper.make_node("Cast", ["CORRID"], ["corrid"], to=i32),
                  helper.make_node("Mul", ["corrid", "END"], ["at_end"]),
                  helper.make_node("Add", ["started", "at_end"], ["summed"])]
        total = "summed"
    nodes.append(helper.make_node("Mul", [total, "READY"], ["OUTPUT"]))
    shape: list[str | int] = ["batch", 1]
    inputs = [helper.make_tensor_value_info(n, i32, shape) for n in names]
    if dyna:
        inputs.append(helper.make_tensor_value_info("CORRID", TensorProto.UINT64, shape))
    graph = helper.make_graph(nodes, "sequence", inputs,
                              [helper.make_tensor_value_info("OUTPUT", i32, shape)])
    return _save(graph, path, opset, producer="edge-toolkit-triton-examples")


def light_onnx_model(name: str) -> Path:
    """The path of one of onnx's bundled light test models (e.g. ``densenet121``)."""
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not in the installed onnx package ({onnx.__version__});"
                                " light models ship in onnx >= 1.15")
    return path


def make_densenet_onnx(path: Path | str) -> Path:
    """Write Triton's ``densenet_onnx`` signature around onnx's light DenseNet-121.

    As Triton's model (max_batch_size 0): input ``data_0`` FP32 [3, 224, 224], output ``fc6_1``
    FP32 [1000] (the light model's [1, 3, 224, 224] -> [1, 1000, 1, 1], unsqueezed and
    squeezed around it). The light model's weights are placeholders: classes are arbitrary.
    """
    model = onnx.load(light_onnx_model("densenet121"))
    graph = model.graph
    for node in graph.node:
        node.input[:] = ["data_0_4d" if n == "data_0" else n for n in node.input]
        node.output[:] = ["fc6_1_4d" if n == "fc6_1" else n for n in node.output]
    graph.node.insert(0, helper.make_node("Unsqueeze", ["data_0"], ["data_0_4d"], axes=[0]))
    graph.node.append(helper.make_node("Squeeze", ["fc6_1_4d"], ["fc6_1"], axes=[0, 2, 3]))
    (data,) = [i for i in graph.input if i.name == "data_0"]
    data.CopyFrom(helper.make_tensor_value_info("data_0", TensorProto.FLOAT, [3, 224, 224]))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("fc6_1", TensorProto.FLOAT, [1000]))
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, path)
    return path


def make_densenet_batched(path: Path | str) -> Path:
    """Write onnx's light DenseNet-121 with a batch dimension: ``data_0`` FP32
    [batch, 3, 224, 224] -> ``fc6_1`` FP32 [batch, 1000] (flattened), the CNN step of
    :func:`write_ensemble_models` (Triton's ensemble example runs an Inception there)."""
    model = onnx.load(light_onnx_model("densenet121"))
    graph = model.graph
    for node in graph.node:
        node.output[:] = ["fc6_1_4d" if n == "fc6_1" else n for n in node.output]
    graph.node.append(helper.make_node("Flatten", ["fc6_1_4d"], ["fc6_1"], axis=1))
    (data,) = [i for i in graph.input if i.name == "data_0"]
    data.CopyFrom(helper.make_tensor_value_info("data_0", TensorProto.FLOAT,
                                                ["batch", 3, 224, 224]))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("fc6_1", TensorProto.FLOAT,
                                                      ["batch", 1000]))
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, path)
    return path


def write_labels(path: Path, count: int) -> Path:
    """Write ``count`` class labels, one per line (``class_0`` ...), to ``path``."""
    path.write_text("".join(f"class_{i}\n" for i in range(count)))
    return path


_STRING_CODE = """\
import numpy as np


def add_sub(inputs, ctx):
    a = inputs["INPUT0"].astype(np.int64)
    b = inputs["INPUT1"].astype(np.int64)
    fmt = np.vectorize(lambda v: str(v).encode(), otypes=[object])
    return {"OUTPUT0": fmt(a + b), "OUTPUT1": fmt(a - b)}


def identity(inputs, ctx):
    return {"OUTPUT0": inputs["INPUT0"]}
"""

_REPEAT_CODE = """\
import time

import numpy as np


def repeat(inputs, ctx):
    delays = inputs["DELAY"]
    for i, value in enumerate(inputs["IN"]):
        time.sleep(float(delays[i]) / 1000.0 if i < len(delays) else 0.0)
        yield {"OUT": np.array([value], dtype=np.int32), "IDX": np.array([i], dtype=np.uint32)}
"""


_IMAGE_CODE = """\
import io

import numpy as np
from PIL import Image


def preprocess(inputs, ctx):
    \"\"\"Each row's encoded image file (JPEG, PNG, ...) -> RGB (or grey), resized, scaled to
    [-1, 1] (Inception's scaling), channels first.\"\"\"
    rows = inputs["INPUT"]
    out = np.empty((len(rows), CHANNELS, SIZE, SIZE), dtype=np.float32)
    for i, row in enumerate(rows):
        with Image.open(io.BytesIO(bytes(row[0]))) as image:
            resized = image.convert(MODE).resize((SIZE, SIZE), Image.Resampling.BILINEAR)
        pixels = np.asarray(resized, dtype=np.float32).reshape(SIZE, SIZE, CHANNELS)
        out[i] = (pixels / 127.5 - 1.0).transpose(2, 0, 1)
    return {"OUTPUT": out}
"""

ENSEMBLE = "preprocess_inception_ensemble"
"""The model Triton's ``ensemble_image_client.py`` asks for."""


def _io(kind: str, name: str, datatype: str, shape: list[int]) -> str:
    return f'[[{kind}]]\nname = "{name}"\ndatatype = "{datatype}"\nshape = {shape}\n'


def write_python_spec(out_dir: Path, name: str, *, module: str, code: str, entry: str,
                      io: list[str], max_batch_size: int = 0, decoupled: bool = False,
                      requires: tuple[str, ...] = ()) -> Path:
    """Write a Python model spec ``out_dir/name/spec.toml`` with its code (see bundle-format)."""
    d = out_dir / name
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{module}.py").write_text(code)
    head = (f'name = "{name}"\nkind = "python"\nmax_batch_size = {max_batch_size}\n'
            f'source = ["{module}.py"]\nentry = "{module}:{entry}"\n'
            f'decoupled = {str(decoupled).lower()}\nrequires = {json.dumps(list(requires))}\n\n')
    spec = d / "spec.toml"
    spec.write_text(head + "\n".join(io))
    return spec


def write_python_example_models(out_dir: Path) -> list[ExampleModel]:
    """Write the BYTES and decoupled Triton example models as Python model specs."""
    w = SIMPLE_WIDTH
    adds = write_python_spec(
        out_dir, "simple_string", module="strings", code=_STRING_CODE, entry="add_sub",
        max_batch_size=8,
        io=[_io("inputs", "INPUT0", "BYTES", [w]), _io("inputs", "INPUT1", "BYTES", [w]),
            _io("outputs", "OUTPUT0", "BYTES", [w]), _io("outputs", "OUTPUT1", "BYTES", [w])])
    ident = write_python_spec(
        out_dir, "simple_identity", module="strings", code=_STRING_CODE, entry="identity",
        max_batch_size=8,
        io=[_io("inputs", "INPUT0", "BYTES", [-1]), _io("outputs", "OUTPUT0", "BYTES", [-1])])
    repeat = write_python_spec(
        out_dir, "repeat_int32", module="repeat", code=_REPEAT_CODE, entry="repeat",
        decoupled=True,
        io=[_io("inputs", "IN", "INT32", [-1]), _io("inputs", "DELAY", "UINT32", [-1]),
            _io("inputs", "WAIT", "UINT32", [1]), _io("outputs", "OUT", "INT32", [1]),
            _io("outputs", "IDX", "UINT32", [1])])
    return [ExampleModel(n, p, max_batch=None) for n, p in
            (("simple_string", adds), ("simple_identity", ident), ("repeat_int32", repeat))]


def write_ensemble_models(out_dir: Path, *, cnn: Path, cnn_input: str, cnn_output: str,
                          classes: int, size: int = 224, channels: int = 3,
                          max_batch_size: int = 8) -> list[ExampleModel]:
    """Write ``preprocess_inception_ensemble`` as an agent pipeline, with the signature
    Triton's ``ensemble_image_client.py`` expects: ``INPUT`` BYTES [1] (an image file's bytes
    per row) -> ``OUTPUT`` FP32 [classes] with labels (the example asks for classification).

    Its steps: ``image_preprocess`` (a Python model: Pillow decodes, converts to RGB, or grey
    when ``channels`` is 1, resizes to ``size``, scales to [-1, 1], NCHW), then ``cnn`` (an
    ONNX model with a batch dimension, input ``cnn_input`` [channels, size, size], output
    ``cnn_output`` [classes]) deployed as ``ensemble_cnn``. Returned in deploy order (members
    first)."""
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grey) or 3 (RGB), not {channels}")
    code = (_IMAGE_CODE.replace("SIZE", str(size)).replace("CHANNELS", str(channels))
            .replace("MODE", '"RGB"' if channels == 3 else '"L"'))
    prep = write_python_spec(
        out_dir, "image_preprocess", module="image_preprocess", code=code, entry="preprocess",
        max_batch_size=max_batch_size, requires=("pillow",),
        io=[_io("inputs", "INPUT", "BYTES", [1]),
            _io("outputs", "OUTPUT", "FP32", [channels, size, size])])
    d = out_dir / ENSEMBLE
    d.mkdir(parents=True, exist_ok=True)
    write_labels(d / "labels.txt", classes)
    spec = d / "spec.toml"
    spec.write_text(
        f'name = "{ENSEMBLE}"\nkind = "pipeline"\nmax_batch_size = {max_batch_size}\n'
        'labels = { OUTPUT = "labels.txt" }\n\n'
        + _io("inputs", "INPUT", "BYTES", [1]) + "\n"
        + _io("outputs", "OUTPUT", "FP32", [classes]) + "\n"
        + '[[steps]]\nmodel = "image_preprocess"\ninputs = { INPUT = "INPUT" }\n'
          'outputs = { OUTPUT = "image" }\n\n'
        + f'[[steps]]\nmodel = "ensemble_cnn"\ninputs = {{ {cnn_input} = "image" }}\n'
          f'outputs = {{ {cnn_output} = "OUTPUT" }}\n')
    return [ExampleModel("image_preprocess", prep, max_batch=None, stage="ensemble"),
            ExampleModel("ensemble_cnn", cnn, max_batch=max_batch_size, stage="ensemble"),
            ExampleModel(ENSEMBLE, spec, max_batch=None, stage="ensemble")]


def write_triton_example_models(out_dir: Path) -> list[ExampleModel]:
    """Write every Triton example model this toolkit can build into ``out_dir``.

    ONNX graphs where ONNX can express them; Python model specs for BYTES and decoupled ones
    (``edge-pack`` cannot check parity of BYTES ONNX inputs).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    i32, i8 = TensorProto.INT32, TensorProto.INT8
    densenet = make_densenet_onnx(out_dir / "densenet_onnx.onnx")
    return [
        ExampleModel("simple", make_add_sub(out_dir / "simple.onnx")),
        ExampleModel("simple_int8", make_add_sub(out_dir / "simple_int8.onnx", dtype=i8)),
        ExampleModel("custom_identity_int32",
                     make_identity(out_dir / "custom_identity_int32.onnx", dtype=i32)),
        ExampleModel("simple_sequence", make_sequence(out_dir / "simple_sequence.onnx"),
                     build_args=SEQUENCE_FLAGS),
        ExampleModel("simple_dyna_sequence",
                     make_sequence(out_dir / "simple_dyna_sequence.onnx", dyna=True),
                     build_args=DYNA_FLAGS, stage="late"),
        ExampleModel("densenet_onnx", densenet, max_batch=None,
                     labels=write_labels(out_dir / "densenet_labels.txt", 1000)),
        *write_python_example_models(out_dir),
        *write_ensemble_models(out_dir, cnn=make_densenet_batched(out_dir / "ensemble_cnn.onnx"),
                               cnn_input="data_0", cnn_output="fc6_1", classes=1000),
    ]
