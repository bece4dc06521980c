"""ONNX model helpers: load and validate, read the IO signature, make the batch dim dynamic."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import onnx
from onnx import TensorProto, numpy_helper

from packager.bundle.errors import ModelError
from packager.bundle.manifest import TensorSpec

BATCH_DIM_NAME = "batch"

# ONNX element type -> KServe v2 datatype name
_ONNX_TO_KSERVE: dict[int, str] = {
    TensorProto.BOOL: "BOOL",
    TensorProto.UINT8: "UINT8",
    TensorProto.UINT16: "UINT16",
    TensorProto.UINT32: "UINT32",
    TensorProto.UINT64: "UINT64",
    TensorProto.INT8: "INT8",
    TensorProto.INT16: "INT16",
    TensorProto.INT32: "INT32",
    TensorProto.INT64: "INT64",
    TensorProto.FLOAT16: "FP16",
    TensorProto.FLOAT: "FP32",
    TensorProto.DOUBLE: "FP64",
    TensorProto.STRING: "BYTES",
}



def load_model(path: Path) -> onnx.ModelProto:
    """Load ``path`` and validate it (checker + strict shape inference); ModelError on failure."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf DecodeError and friends: not an ONNX file
        raise ModelError(f"{path}: not an ONNX model (cannot parse the protobuf: "
                         f"{_first_line(exc)})") from exc
    if not model.graph.node or not model.opset_import:
        raise ModelError(f"{path}: not an ONNX model (no graph nodes or no opset import); "
                         "is the file truncated?")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise ModelError(f"{path}: the ONNX checker rejects the model: {_first_line(exc)}") from exc
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as exc:
        raise ModelError(f"{path}: ONNX shape inference fails: {_first_line(exc)}") from exc
    return model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _initializer_names(model: onnx.ModelProto) -> set[str]:
    return {init.name for init in model.graph.initializer}


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that callers feed (old exports also list initializers as inputs)."""
    inits = _initializer_names(model)
    return [vi for vi in model.graph.input if vi.name not in inits]


def _tensor_spec(vi: onnx.ValueInfoProto) -> TensorSpec:
    ttype = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise ModelError(f"tensor {vi.name!r} is not a plain tensor (sequences and maps are not "
                         "supported)")
    if ttype.elem_type not in _ONNX_TO_KSERVE:
        name = TensorProto.DataType.Name(ttype.elem_type)
        raise ModelError(f"tensor {vi.name!r} has element type {name}, which KServe v2 cannot "
                         "carry")
    if not ttype.HasField("shape"):
        raise ModelError(f"tensor {vi.name!r} has no shape; export the model with static ranks")
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim)
    return TensorSpec(name=vi.name, datatype=_ONNX_TO_KSERVE[ttype.elem_type], shape=dims)


def io_signature(model: onnx.ModelProto) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """(inputs, outputs) as TensorSpecs; shapes include the batch dim, -1 marks a dynamic dim."""
    inputs = tuple(_tensor_spec(vi) for vi in real_inputs(model))
    outputs = tuple(_tensor_spec(vi) for vi in model.graph.output)
    if not inputs or not outputs:
        raise ModelError("the model has no inputs or no outputs")
    return inputs, outputs


def leading_dim_state(specs: Iterable[TensorSpec]) -> str:
    """'dynamic' when dim 0 of every tensor is dynamic, 'one' when every dim 0 is fixed at 1,
    else 'none' (no common batch dimension)."""
    firsts = [s.shape[0] if s.shape else None for s in specs]
    if firsts and all(d == -1 for d in firsts):
        return "dynamic"
    if firsts and all(d == 1 for d in firsts):
        return "one"
    return "none"


def _set_leading_dim_symbolic(vi: onnx.ValueInfoProto) -> None:
    dims = vi.type.tensor_type.shape.dim
    if dims:
        dims[0].Clear()
        dims[0].dim_param = BATCH_DIM_NAME


def _batch_reachable(model: onnx.ModelProto, start: set[str]) -> set[str]:
    """Names of tensors computed (transitively) from the ``start`` tensors."""
    reach = set(start)
    for node in model.graph.node:  # graph nodes are topologically sorted
        if any(i in reach for i in node.input if i):
            reach.update(o for o in node.output if o)
    return reach


def make_batch_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose fixed leading batch dim (1) is symbolic on every real input and
    output. Reshape targets that pin the batch to 1 on the data path become 0 ("copy dim 0").

    Raises ModelError when some input or output has no leading dim of 1 to free.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inputs = real_inputs(out)
    tensors = [*inputs, *out.graph.output]
    for vi in tensors:
        dims = vi.type.tensor_type.shape.dim
        if not dims:
            raise ModelError(f"tensor {vi.name!r} is a scalar; it has no batch dimension")
        d0 = dims[0]
        if d0.HasField("dim_value") and d0.dim_value != 1:
            raise ModelError(f"tensor {vi.name!r} has a fixed leading dim of {d0.dim_value}; "
                             "--dynamic-batch needs a leading dim of 1 (or already dynamic)")
    for vi in tensors:
        _set_leading_dim_symbolic(vi)

    # Reshapes on the data path with a constant target shape [1, ...] would pin the batch at 1.
    inits = {init.name: init for init in out.graph.initializer}
    reach = _batch_reachable(out, {vi.name for vi in inputs})
    replaced: set[str] = set()
    for node in out.graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        if node.input[0] not in reach or node.input[1] not in inits:
            continue
        if any(a.name == "allowzero" and a.i == 1 for a in node.attribute):
            continue
        target = numpy_helper.to_array(inits[node.input[1]])
        if target.ndim != 1 or target.size == 0 or int(target[0]) != 1:
            continue
        fixed = target.copy()
        fixed[0] = 0
        new_name = f"{node.input[1]}__dynamic_batch"
        if new_name not in inits:
            new_init = numpy_helper.from_array(fixed.astype(target.dtype), new_name)
            out.graph.initializer.append(new_init)
            inits[new_name] = new_init
            # old exports list initializers among graph inputs; keep that consistent
            if any(vi.name == node.input[1] for vi in out.graph.input):
                out.graph.input.append(onnx.helper.make_tensor_value_info(
                    new_name, TensorProto.INT64, [int(fixed.size)]))
        replaced.add(node.input[1])
        node.input[1] = new_name
    _drop_unused_initializers(out, replaced)

    # Intermediate shapes recorded with batch 1 are stale now; let shape inference redo them.
    del out.graph.value_info[:]
    try:
        out = onnx.shape_inference.infer_shapes(out)
        onnx.checker.check_model(out)
    except Exception as exc:
        raise ModelError(f"the model is not valid after making its batch dim dynamic: "
                         f"{_first_line(exc)}") from exc
    return out


def _drop_unused_initializers(model: onnx.ModelProto, names: set[str]) -> None:
    used = {i for n in model.graph.node for i in n.input}
    dead = names - used
    if not dead:
        return
    keep = [i for i in model.graph.initializer if i.name not in dead]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    keep_in = [vi for vi in model.graph.input if vi.name not in dead]
    del model.graph.input[:]
    model.graph.input.extend(keep_in)


def custom_domain_nodes(model: onnx.ModelProto,
                        allowed: tuple[str, ...] = ()) -> list[onnx.NodeProto]:
    """Nodes whose op domain is neither standard ONNX nor in ``allowed``."""
    standard = ("", "ai.onnx", "ai.onnx.ml", *allowed)
    return [n for n in model.graph.node if n.domain not in standard]
