"""Translate between KServe v2 protobuf messages and the serving core's plain values.

Per-request work is parsing plus at most one copy: raw input bytes are viewed in place with
``numpy.frombuffer`` (the core copies when it batches); outputs are written once as raw bytes.
Tensors in system shared memory (``shared_memory_region`` parameters) are read from and written
to their regions through :mod:`edge_agent.frontends.common.shared_memory`; what both wires
share (limits, shapes, raw bytes, version parsing) is :mod:`edge_agent.frontends.common`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from edge_agent import bytes_tensors
from edge_agent.core.api import DataPlaneAPI, ModelConfigInfo, RepositoryEntry, ServerMetadata
from edge_agent.core.decoupled import is_decoupled
from edge_agent.core.triton_wording import contents_with_raw
from edge_agent.core.types import (
    DurationStat,
    InferRequest,
    InferResult,
    ModelMetadata,
    ModelStats,
    triton_platform,
)
from edge_agent.errors import InvalidInputError
from edge_agent.frontends.common.classification import classify
from edge_agent.frontends.common.names import parse_version
from edge_agent.frontends.common.request_options import (
    CLASSIFICATION,
    DEFAULTS,
    RequestOptions,
    check_input,
    check_output,
    parameter_values,
    parse_request,
)
from edge_agent.frontends.common.shared_memory import (
    BYTE_SIZE,
    OFFSET,
    REGION,
    Placement,
    SharedMemoryRegistry,
)
from edge_agent.frontends.common.tensors import (
    MAX_PARAMETER_BYTES,
    MAX_PARAMETERS,
    MAX_REQUEST_ID_BYTES,
    MAX_TENSORS,
    DeclaredInputs,
    check_shape,
    datatype_of,
    tensor_from_bytes,
    wire_dtype,
)
from edge_agent.frontends.common.undecodable import Undecodable
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import model_config_pb2 as mc
from edge_agent.frontends.grpc.input_format import input_format
from edge_agent.frontends.grpc.wire_types import CONTENTS_FIELDS, config_data_type
from packager.bundle.manifest import Manifest, SequenceConfig, TensorSpec, label_file

_CONTROL_KINDS = {"START": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START,
                  "READY": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY,
                  "END": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END,
                  "CORRID": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID}


def _sequence_batching(seq: SequenceConfig, m: Manifest) -> mc.ModelSequenceBatching:
    """A stateful model's sequence batcher as Triton shows it."""
    out = mc.ModelSequenceBatching(max_sequence_idle_microseconds=seq.max_sequence_idle_us)
    inputs = {t.name: t for t in m.inputs}
    for state in seq.states:
        spec = inputs[state.input_name]
        out.state.append(mc.ModelSequenceBatching.State(
            input_name=state.input_name, output_name=state.output_name,
            data_type=config_data_type(spec.datatype), dims=_dims(spec, m.batched)))
    if seq.strategy == "oldest":  # its requests batch in the dynamic batcher
        out.oldest.max_candidate_sequences = seq.max_candidate_sequences
        out.oldest.max_queue_delay_microseconds = m.batching.max_queue_delay_us
        out.oldest.preferred_batch_size.extend(m.batching.preferred_batch_sizes)
    else:
        out.direct.SetInParent()
    for c in seq.control_inputs:
        control = mc.ModelSequenceBatching.Control(kind=_CONTROL_KINDS[c.kind])
        if c.kind == "CORRID":
            control.data_type = config_data_type(c.datatype)
        elif c.datatype == "INT32":
            control.int32_false_true.extend((0, 1))
        elif c.datatype == "FP32":
            control.fp32_false_true.extend((0.0, 1.0))
        else:
            control.bool_false_true.extend((False, True))
        out.control_input.append(mc.ModelSequenceBatching.ControlInput(name=c.name,
                                                                       control=[control]))
    return out


def _options(msg: pb.ModelInferRequest) -> RequestOptions:
    """The request's options (edge_agent.frontends.common.request_options): every parameter of the
    request, its inputs and its outputs is served or refused by name, never ignored."""
    for tensor in msg.inputs:
        if len(tensor.parameters):
            check_input(parameter_values(tensor.parameters), "grpc", tensor.name)
    for out in msg.outputs:
        if len(out.parameters):
            check_output(parameter_values(out.parameters), "grpc", out.name)
    if not len(msg.parameters):
        return DEFAULTS
    return parse_request(parameter_values(msg.parameters), "grpc", msg.model_name)


def _check_parameters(params: Any, where: str) -> None:
    if len(params) > MAX_PARAMETERS:
        raise InvalidInputError(
            f"{where} has {len(params)} parameters; at most {MAX_PARAMETERS} are accepted")
    for key, p in params.items():
        if _longer(key, MAX_PARAMETER_BYTES) or (
                p.WhichOneof("parameter_choice") == "string_param"
                and _longer(p.string_param, MAX_PARAMETER_BYTES)):
            raise InvalidInputError(
                f"{where}: parameter {key[:40]!r} is longer than {MAX_PARAMETER_BYTES} bytes "
                "(key or string value)")


def _longer(text: str, limit: int) -> bool:
    # a character encodes to at most 4 UTF-8 bytes: encode only a text that might be too long
    return len(text) * 4 > limit and len(text.encode()) > limit


def _check_bounds(msg: pb.ModelInferRequest) -> None:
    """Refuse ids, parameters and output lists beyond the documented limits (on the hot path:
    nothing is encoded or formatted unless a limit may be passed)."""
    if _longer(msg.model_name, MAX_PARAMETER_BYTES):
        raise InvalidInputError(f"model name is longer than {MAX_PARAMETER_BYTES} bytes")
    if _longer(msg.id, MAX_REQUEST_ID_BYTES):
        raise InvalidInputError(
            f"request id is {len(msg.id.encode())} bytes; at most {MAX_REQUEST_ID_BYTES} are "
            "accepted")
    if len(msg.parameters):
        _check_parameters(msg.parameters, f"request for model '{msg.model_name}'")
    if len(msg.inputs) > MAX_TENSORS:  # refused before one of them is read
        raise InvalidInputError(
            f"request for model '{msg.model_name}' names {len(msg.inputs)} inputs; at most "
            f"{MAX_TENSORS} are accepted: give each input the model has once")
    for tensor in msg.inputs:
        if len(tensor.parameters):
            _check_parameters(tensor.parameters, f"input '{tensor.name}'")
    outputs = msg.outputs
    if len(outputs) > MAX_TENSORS:  # refused before one of them is read
        raise InvalidInputError(
            f"request for model '{msg.model_name}' names {len(outputs)} outputs; at most "
            f"{MAX_TENSORS} are accepted: name each output the model has once")
    seen: set[str] = set()
    for out in outputs:  # one pass, ended by the first name given twice
        name = out.name
        if name in seen:
            raise InvalidInputError(
                f"request for model '{msg.model_name}' asks for output '{name}' more than "
                "once; name each output once")
        seen.add(name)
        if len(out.parameters):
            _check_parameters(out.parameters, f"output '{name}'")


REGION_PARAM = "shared_memory_region"


def _int_param(params: Mapping[str, pb.InferParameter], key: str, what: str,
               default: int | None = None) -> int:
    if key not in params:
        if default is None:
            raise InvalidInputError(f"{what}: parameter '{key}' is missing; a tensor in shared "
                                    f"memory needs '{REGION}' and '{BYTE_SIZE}'")
        return default
    p = params[key]
    kind = p.WhichOneof("parameter_choice")
    if kind not in ("int64_param", "uint64_param"):
        raise InvalidInputError(f"{what}: parameter '{key}' must be an integer")
    value = int(getattr(p, kind))
    if value < 0:
        raise InvalidInputError(f"{what}: parameter '{key}' must be >= 0, got {value}")
    return value


def region_reference(params: Mapping[str, pb.InferParameter],
                     what: str) -> tuple[str, int, int] | None:
    """(region name, offset, byte size) named by a tensor's parameters, or None when the
    tensor is not in shared memory."""
    if REGION not in params:
        return None
    p = params[REGION]
    if p.WhichOneof("parameter_choice") != "string_param" or not p.string_param:
        raise InvalidInputError(f"{what}: parameter '{REGION}' must be a region name (string)")
    return (p.string_param, _int_param(params, OFFSET, what, default=0),
            _int_param(params, BYTE_SIZE, what))


def _shape(tensor: pb.ModelInferRequest.InferInputTensor) -> list[int]:
    return check_shape(tensor.name, tensor.shape[:])  # slicing a repeated field is cheap


def _from_raw(tensor: pb.ModelInferRequest.InferInputTensor, raw: bytes) -> np.ndarray:
    return tensor_from_bytes(tensor.name, tensor.datatype, _shape(tensor), raw)


def _from_typed(tensor: pb.ModelInferRequest.InferInputTensor,
                declared: DeclaredInputs | None) -> np.ndarray:
    """An input from its typed contents: checked against the model from the declared datatype,
    shape and the field's length first, then converted straight into an array of the element
    size (no Python list in between)."""
    dtype = np.dtype(object) if tensor.datatype == "BYTES" \
        else wire_dtype(tensor.datatype, tensor.name)
    shape = _shape(tensor)
    field = CONTENTS_FIELDS.get(tensor.datatype)
    if field is None:
        raise InvalidInputError(
            f"input '{tensor.name}': {tensor.datatype} has no typed contents field; "
            "send it in raw_input_contents")
    values = getattr(tensor.contents, field)
    count = math.prod(shape)
    if len(values) != count:
        raise InvalidInputError(
            f"input '{tensor.name}': contents.{field} holds {len(values)} values but shape "
            f"{list(shape)} needs {count}")
    for other in CONTENTS_FIELDS.values():
        if other != field and len(getattr(tensor.contents, other)):
            raise InvalidInputError(
                f"input '{tensor.name}': {tensor.datatype} data belongs in contents.{field}, "
                f"not contents.{other}")
    if declared is not None:
        declared.check(tensor.name, tensor.datatype, shape)
    # fromiter fills the array value by value; np.asarray goes through Python numbers first
    # (measured for 5M values: fp32_contents -> FP32 peaked +210 MiB with asarray, +19 MiB
    # (the array) with fromiter, which was also faster: 0.45 s against 0.58 s)
    try:
        return np.fromiter(values, dtype=dtype, count=count).reshape(shape)
    except OverflowError:
        raise InvalidInputError(f"input '{tensor.name}': a value in contents.{field} is out "
                                f"of the range of {tensor.datatype}") from None


def _no_shm(what: str) -> InvalidInputError:
    return InvalidInputError(f"{what}: shared memory is not served on this connection (over "
                             "TCP only with [grpc] tcp_shared_memory = true; the Unix socket "
                             "serves it); send the tensor in the request")


def _shm_inputs(msg: pb.ModelInferRequest, shm: SharedMemoryRegistry | None,
                raws: list[bytes], declared: DeclaredInputs | None) -> dict[str, np.ndarray]:
    """Inputs of a request where some name a shared memory region; the others take the raw
    contents in order (one per input not in shared memory) or their typed contents."""
    inputs: dict[str, np.ndarray] = {}
    in_request = [t for t in msg.inputs if region_reference(t.parameters, t.name) is None]
    if raws and len(raws) != len(in_request):
        raise InvalidInputError(
            f"request for model '{msg.model_name}' has {len(in_request)} inputs outside shared "
            f"memory but {len(raws)} raw_input_contents entries; send one per such input")
    next_raw = iter(raws)
    for tensor in msg.inputs:
        if tensor.name in inputs:
            raise InvalidInputError(f"input '{tensor.name}' is given more than once")
        ref = region_reference(tensor.parameters, f"input '{tensor.name}'")
        if ref is None:
            if raws and tensor.HasField("contents"):
                raise InvalidInputError(f"{contents_with_raw(tensor.name, msg.model_name)}; "
                                        "use one form for every input")
            inputs[tensor.name] = _from_raw(tensor, next(next_raw)) if raws else \
                _from_typed(tensor, declared)
            continue
        if shm is None:
            raise _no_shm(f"input '{tensor.name}'")
        if tensor.HasField("contents"):
            raise InvalidInputError(f"input '{tensor.name}': contents given together with a "
                                    "shared memory region; use one")
        inputs[tensor.name] = shm.read_input(ref, tensor.name,
                                             wire_dtype(tensor.datatype, tensor.name),
                                             _shape(tensor))
    return inputs


def to_infer_request(msg: pb.ModelInferRequest, shm: SharedMemoryRegistry | None = None,
                     dataplane: DataPlaneAPI | None = None) -> tuple[InferRequest, bool]:
    """Decode a ModelInferRequest; returns the core request and whether it used raw contents.

    Inputs naming a shared memory region are read from ``shm`` (refused when None). Typed
    contents are checked against what ``dataplane`` says the model declares before they are
    converted."""
    if isinstance(msg, Undecodable):
        raise msg.refused("ModelStreamInfer", "a stream")  # unary calls never get here
    if not msg.model_name:
        raise InvalidInputError("empty request: model_name is missing")
    if not msg.inputs:
        raise InvalidInputError(f"request for model '{msg.model_name}' has no inputs")
    _check_bounds(msg)
    options = _options(msg)
    raws = msg.raw_input_contents[:]
    inputs: dict[str, np.ndarray] = {}
    version = parse_version(msg.model_version, msg.model_name)
    declared = None if dataplane is None or raws else \
        DeclaredInputs(dataplane, msg.model_name, version)
    if any(len(t.parameters) for t in msg.inputs) and \
            any(REGION_PARAM in t.parameters for t in msg.inputs):
        inputs = _shm_inputs(msg, shm, raws, declared)
        raws = raws or [b""]  # outputs come back raw
    elif raws:
        typed = next((t.name for t in msg.inputs if t.HasField("contents")), None)
        if typed is not None:  # checked first, as Triton does
            raise InvalidInputError(
                f"{contents_with_raw(typed, msg.model_name)}; input '{typed}': typed "
                "contents given together with raw_input_contents; use one form for every input")
        if len(raws) != len(msg.inputs):
            raise InvalidInputError(
                f"request for model '{msg.model_name}' has {len(msg.inputs)} inputs but "
                f"{len(raws)} raw_input_contents entries; send one per input, in order")
        for tensor, raw in zip(msg.inputs, raws, strict=True):
            if tensor.name in inputs:
                raise InvalidInputError(f"input '{tensor.name}' is given more than once")
            inputs[tensor.name] = _from_raw(tensor, raw)
    else:
        for tensor in msg.inputs:
            if tensor.name in inputs:
                raise InvalidInputError(f"input '{tensor.name}' is given more than once")
            inputs[tensor.name] = _from_typed(tensor, declared)
    outputs = [o.name for o in msg.outputs] if len(msg.outputs) else None
    request = InferRequest(
        model=msg.model_name,
        inputs=inputs,
        version=version,
        outputs=outputs,
        id=msg.id,
        timeout_us=options.timeout_us,
        priority=options.priority,
        sequence=options.sequence,
    )
    return request, bool(raws)


def output_classes(msg: pb.ModelInferRequest) -> dict[str, int]:
    """Output name -> the class count it asks for (the classification extension); checked
    already by :func:`to_infer_request`."""
    return {o.name: int(parameter_values(o.parameters)[CLASSIFICATION]) for o in msg.outputs
            if len(o.parameters) and CLASSIFICATION in o.parameters}


def classified(result: InferResult, msg: pb.ModelInferRequest,
               dataplane: DataPlaneAPI) -> InferResult:
    """``result`` with the outputs ``msg`` asks classes of answered as classes."""
    if not any(len(o.parameters) for o in msg.outputs):
        return result
    return classify(result, output_classes(msg), dataplane)


def output_placements(msg: pb.ModelInferRequest,
                      shm: SharedMemoryRegistry | None) -> dict[str, Placement] | None:
    """The requested outputs that go to shared memory, checked before inference; None when
    none does."""
    placed: dict[str, Placement] | None = None
    for out in msg.outputs:
        if not len(out.parameters):
            continue
        ref = region_reference(out.parameters, f"output '{out.name}'")
        if ref is None:
            continue
        if shm is None:
            raise _no_shm(f"output '{out.name}'")
        if placed is None:
            placed = {}
        placed[out.name] = shm.placement(ref, out.name)
    return placed


def to_infer_response(result: InferResult, *, raw: bool = True,
                      order: Iterable[str] | None = None,
                      placed: Mapping[str, Placement] | None = None) -> pb.ModelInferResponse:
    """Encode an InferResult; outputs in ``order`` (the request's) or the result's order.

    Outputs in ``placed`` are written to their shared memory regions; the response lists them
    (name, datatype, shape) with an empty raw entry each (as Triton does)."""
    response = pb.ModelInferResponse(model_name=result.model, model_version=str(result.version),
                                     id=result.id)
    names = list(order) if order else list(result.outputs)
    for name in names:
        array = result.outputs[name]
        datatype = datatype_of(array.dtype)
        out = response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        if placed and name in placed:
            SharedMemoryRegistry.write_output(placed[name], name, array)
            # an empty entry even when every output is placed, as Triton answers: its C++
            # client (perf_analyzer) reads raw_output_contents[i] for every output i
            response.raw_output_contents.append(b"")
        elif datatype == "BYTES":
            if raw:
                response.raw_output_contents.append(bytes_tensors.encode(array, name))
            else:
                out.contents.bytes_contents.extend(bytes_tensors.elements(array, name))
        elif raw:
            if array.dtype.byteorder == ">":
                array = array.astype(array.dtype.newbyteorder("<"))
            response.raw_output_contents.append(array.tobytes())
        else:
            field = CONTENTS_FIELDS[datatype]
            getattr(out.contents, field).extend(array.ravel().tolist())
    return response


def _tensor_metadata(spec: TensorSpec) -> pb.ModelMetadataResponse.TensorMetadata:
    return pb.ModelMetadataResponse.TensorMetadata(
        name=spec.name, datatype=spec.datatype, shape=list(spec.shape))


def to_model_metadata(meta: ModelMetadata) -> pb.ModelMetadataResponse:
    """Encode ModelMetadata (shapes include the batch dim, -1 where dynamic)."""
    return pb.ModelMetadataResponse(
        name=meta.name,
        versions=[str(v) for v in meta.versions],
        platform=meta.platform,
        inputs=[_tensor_metadata(s) for s in meta.inputs],
        outputs=[_tensor_metadata(s) for s in meta.outputs],
    )


def to_server_metadata(meta: ServerMetadata) -> pb.ServerMetadataResponse:
    """Encode ServerMetadata."""
    return pb.ServerMetadataResponse(name=meta.name, version=meta.version,
                                     extensions=list(meta.extensions))


def _dims(spec: TensorSpec, batched: bool) -> list[int]:
    return list(spec.shape[1:] if batched else spec.shape)


_GPU_DEVICES = ("cuda", "tensorrt", "gpu")


def _instance_group(name: str, info: ModelConfigInfo) -> mc.ModelInstanceGroup:
    """KIND_GPU (GPU 0) when the backend runs on a GPU (CUDA or TensorRT execution provider,
    OpenVINO GPU, the TensorRT backend's ``cuda:0``), else KIND_CPU."""
    if info.device.lower().startswith(_GPU_DEVICES):
        return mc.ModelInstanceGroup(name=f"{name}_0", count=info.instances,
                                     kind=mc.ModelInstanceGroup.KIND_GPU, gpus=[0])
    return mc.ModelInstanceGroup(name=f"{name}_0", count=info.instances,
                                 kind=mc.ModelInstanceGroup.KIND_CPU)


def to_model_config(info: ModelConfigInfo) -> mc.ModelConfig:
    """Encode what ModelConfig reports: IO without the batch dim, batching, instances."""
    m = info.manifest
    b = m.batching
    batched = b.max_batch_size > 0
    controls, states = m.sequence.hidden() if m.sequence else (set(), set())
    config = mc.ModelConfig(
        name=m.name,
        platform=triton_platform(info.backend),
        backend=info.backend,
        max_batch_size=b.max_batch_size,
        input=[mc.ModelInput(name=s.name, data_type=config_data_type(s.datatype),
                             format=input_format(m, s.name), dims=_dims(s, batched))
               for s in m.inputs if s.name not in controls],
        output=[mc.ModelOutput(name=s.name, data_type=config_data_type(s.datatype),
                               dims=_dims(s, batched),
                               label_filename=label_file(s.name) if s.name in m.labels else "")
                for s in m.outputs if s.name not in states],
        instance_group=[_instance_group(m.name, info)],
        default_model_filename=m.artifacts.get(info.backend, ""),
    )
    if is_decoupled(m):
        config.model_transaction_policy.decoupled = True
    if m.sequence is not None:  # Triton: sequence_batching or dynamic_batching, not both
        config.sequence_batching.CopyFrom(_sequence_batching(m.sequence, m))
    elif batched:
        config.dynamic_batching.CopyFrom(mc.ModelDynamicBatching(
            preferred_batch_size=list(b.preferred_batch_sizes),
            max_queue_delay_microseconds=b.max_queue_delay_us,
            default_queue_policy=mc.ModelQueuePolicy(
                timeout_action=mc.ModelQueuePolicy.REJECT,
                default_timeout_microseconds=b.default_timeout_us,
                allow_timeout_override=b.allow_timeout_override,
                max_queue_size=b.max_queue_size,
            ),
        ))
    return config


def _duration(stat: DurationStat) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=stat.count, ns=stat.ns)


def to_model_statistics(stats: ModelStats) -> pb.ModelStatistics:
    """Encode one model version's cumulative statistics (Triton's fields)."""
    return pb.ModelStatistics(
        name=stats.name,
        version=str(stats.version),
        last_inference=stats.last_inference_ms,
        inference_count=stats.inference_count,
        execution_count=stats.execution_count,
        inference_stats=pb.InferStatistics(
            success=_duration(stats.success),
            fail=_duration(stats.fail),
            queue=_duration(stats.queue),
            compute_input=_duration(stats.compute_input),
            compute_infer=_duration(stats.compute_infer),
            compute_output=_duration(stats.compute_output),
            cache_hit=_duration(stats.cache_hit),
            cache_miss=_duration(stats.cache_miss),
        ),
        batch_stats=[
            pb.InferBatchStatistics(
                batch_size=bs.batch_size,
                compute_input=_duration(bs.compute_input),
                compute_infer=_duration(bs.compute_infer),
                compute_output=_duration(bs.compute_output),
            )
            for _, bs in sorted(stats.batch_stats.items())
        ],
    )


def to_repository_index(entries: Iterable[RepositoryEntry]) -> pb.RepositoryIndexResponse:
    """Encode the repository index."""
    return pb.RepositoryIndexResponse(models=[
        pb.RepositoryIndexResponse.ModelIndex(name=e.name, version=str(e.version),
                                              state=e.state, reason=e.reason)
        for e in entries
    ])
