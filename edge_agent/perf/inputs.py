"""What ``edge-agent perf`` sends: the model's inputs (from ModelMetadata and ModelConfig over
KServe v2, shaped by ``-b`` and ``--shape``, random or from ``--input-data``) serialized once,
and optionally placed in system shared memory (``--shared-memory system``). The REST forms of
the description, the request and the registration are :mod:`edge_agent.perf.rest`."""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc
import numpy as np

from edge_agent.errors import InvalidInputError
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from packager.bundle.datatypes import FIXED_SIZE, datatype_of


@dataclass(frozen=True)
class ServedTensor:
    """One input or output as the server describes it (batch dimension included)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ServedModel:
    """A model's tensors and whether its first dimension is the batch."""

    name: str
    inputs: tuple[ServedTensor, ...]
    outputs: tuple[ServedTensor, ...]
    max_batch_size: int


def parse_shapes(values: list[str]) -> dict[str, tuple[int, ...]]:
    """``NAME:D1,D2`` strings (perf_analyzer's --shape) as name -> dims."""
    out: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) < 0:
            raise InvalidInputError(f"--shape {value!r}: expected NAME:D1,D2,... with "
                                    "non-negative sizes (e.g. input:3,224,224)")
        out[name] = shape
    return out


def describe_model(target: str, model: str, version: str = "",
                   timeout_s: float = 30.0) -> ServedModel:
    """ModelMetadata and ModelConfig of ``model`` at ``target`` (KServe v2 gRPC)."""
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            meta = stub.ModelMetadata(pb.ModelMetadataRequest(name=model, version=version),
                                      timeout=timeout_s)
            config = stub.ModelConfig(pb.ModelConfigRequest(name=model, version=version),
                                      timeout=timeout_s).config
        except grpc.RpcError as exc:
            raise InvalidInputError(f"{target}: model {model!r}: {exc.code().name}: "
                                    f"{exc.details()}") from None

    def spec(t: pb.ModelMetadataResponse.TensorMetadata) -> ServedTensor:
        return ServedTensor(t.name, t.datatype, tuple(int(d) for d in t.shape))

    return ServedModel(model, tuple(spec(t) for t in meta.inputs),
                     tuple(spec(t) for t in meta.outputs), int(config.max_batch_size))


def _dims(t: ServedTensor, model: ServedModel, batch: int,
          shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The full shape of ``t`` for a request of ``batch`` (--shape gives the non-batch dims)."""
    batched = model.max_batch_size > 0
    inner = t.shape[1:] if batched else t.shape
    if t.name in shapes:
        inner = shapes[t.name]
    elif any(d < 0 for d in inner):
        raise InvalidInputError(f"input '{t.name}' has a variable dimension {list(t.shape)}; "
                                f"pass --shape {t.name}:D1,D2,... (without the batch "
                                "dimension)")
    return ((batch,) if batched else ()) + tuple(inner)


def make_inputs(model: ServedModel, *, batch: int = 1,
                shapes: Mapping[str, tuple[int, ...]] | None = None,
                data_file: Path | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """One request's inputs: from ``data_file`` (an .npz keyed by input name; a leading
    dimension of samples is cut or repeated to ``batch``) or random values of each dtype."""
    if model.max_batch_size == 0 and batch != 1:
        raise InvalidInputError(f"model {model.name!r} does not batch (max_batch_size 0); "
                                "use -b 1")
    if 0 < model.max_batch_size < batch:
        raise InvalidInputError(f"-b {batch} is larger than model {model.name!r}'s "
                                f"max_batch_size {model.max_batch_size}")
    shapes = shapes or {}
    unknown = set(shapes) - {t.name for t in model.inputs}
    if unknown:
        raise InvalidInputError(f"--shape names {sorted(unknown)}, not inputs of "
                                f"{model.name!r} (inputs: {[t.name for t in model.inputs]})")
    data: dict[str, np.ndarray] = {}
    if data_file is not None:
        try:
            with np.load(data_file, allow_pickle=False) as npz:
                data = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"--input-data {data_file}: {exc}") from None
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for t in model.inputs:
        dtype = FIXED_SIZE.get(t.datatype)
        if dtype is None:
            raise InvalidInputError(f"input '{t.name}' is {t.datatype}: perf sends numeric "
                                    "tensors only")
        if t.name in data:
            out[t.name] = _from_file(t, data[t.name], model, batch, dtype)
            continue
        if data_file is not None:
            raise InvalidInputError(f"--input-data {data_file} has no array '{t.name}' "
                                    f"(it has {sorted(data)})")
        dims = _dims(t, model, batch, shapes)
        if dtype.kind == "f":
            out[t.name] = rng.random(dims).astype(dtype)
        elif dtype.kind == "b":
            out[t.name] = rng.integers(0, 2, dims).astype(dtype)
        else:
            out[t.name] = rng.integers(0, 100, dims).astype(dtype)
    return out


def _from_file(t: ServedTensor, array: np.ndarray, model: ServedModel, batch: int,
               dtype: np.dtype) -> np.ndarray:
    array = np.asarray(array).astype(dtype, copy=False)
    if model.max_batch_size > 0:
        if array.ndim == len(t.shape) - 1:  # one sample
            array = array[None]
        reps = -(-batch // array.shape[0])
        array = np.concatenate([array] * reps)[:batch]
    return np.ascontiguousarray(array)


def request_bytes(model: str, inputs: Mapping[str, np.ndarray], version: str = "",
                  regions: Mapping[str, tuple[str, int, int]] | None = None,
                  outputs: Mapping[str, tuple[str, int, int]] | None = None) -> bytes:
    """A serialized ModelInferRequest: raw contents, or (``regions``: input -> (region,
    offset, size)) references into shared memory; ``outputs`` asks outputs into regions."""
    msg = pb.ModelInferRequest(model_name=model, model_version=version)
    for name, array in inputs.items():
        tensor = msg.inputs.add(name=name, datatype=datatype_of(array.dtype) or "",
                                shape=array.shape)
        if regions and name in regions:
            _region_params(tensor.parameters, regions[name])
        else:
            msg.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    for name, where in (outputs or {}).items():
        _region_params(msg.outputs.add(name=name).parameters, where)
    return msg.SerializeToString()


def _region_params(params: object, where: tuple[str, int, int]) -> None:
    region, offset, size = where
    params["shared_memory_region"].string_param = region  # type: ignore[index]  # a protobuf map
    params["shared_memory_offset"].int64_param = offset  # type: ignore[index]  # a protobuf map
    params["shared_memory_byte_size"].int64_param = size  # type: ignore[index]  # a protobuf map


class RegionRegistrar(Protocol):
    """Registers system shared memory regions with a server another way than gRPC."""

    def register(self, name: str, byte_size: int) -> None: ...

    def unregister(self, name: str) -> None: ...


@dataclass
class SystemSharedMemory:
    """One POSIX shared-memory object holding the inputs (and room for the outputs),
    registered with the server; :meth:`close` unregisters and unlinks it."""

    target: str
    rest: RegionRegistrar | None = None  # registers over KServe v2 REST instead of gRPC
    name: str = field(default_factory=lambda: f"edge-perf-{secrets.token_hex(6)}")
    registered: bool = False
    path: Path | None = None

    def place(self, model: ServedModel, inputs: Mapping[str, np.ndarray],
              batch: int) -> tuple[dict[str, tuple[str, int, int]],
                                   dict[str, tuple[str, int, int]]]:
        """Write the inputs, register the region; returns (input regions, output regions).
        Outputs whose size cannot be known in advance come back in the response instead."""
        layout: list[tuple[str, int]] = [(n, a.nbytes) for n, a in inputs.items()]
        out_sizes: list[tuple[str, int]] = []
        for t in model.outputs:
            dims = ((batch,) if model.max_batch_size > 0 else ()) + (
                t.shape[1:] if model.max_batch_size > 0 else t.shape)
            dtype = FIXED_SIZE.get(t.datatype)
            if dtype is not None and all(d >= 0 for d in dims):
                out_sizes.append((t.name, int(np.prod(dims)) * dtype.itemsize))
        total = sum(s for _, s in layout + out_sizes) or 1
        self.path = Path("/dev/shm") / self.name
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, total)
            with mmap.mmap(fd, total) as mem:
                offset = 0
                regions: dict[str, tuple[str, int, int]] = {}
                for name, size in layout:
                    mem[offset:offset + size] = np.ascontiguousarray(inputs[name]).tobytes()
                    regions[name] = (self.name, offset, size)
                    offset += size
                outputs: dict[str, tuple[str, int, int]] = {}
                for name, size in out_sizes:
                    outputs[name] = (self.name, offset, size)
                    offset += size
        finally:
            os.close(fd)
        try:
            self._register(total)
        except InvalidInputError:
            self.close()
            raise
        self.registered = True
        return regions, outputs

    def _register(self, total: int) -> None:
        if self.rest is not None:
            self.rest.register(self.name, total)
            return
        with grpc.insecure_channel(self.target) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            try:
                stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
                    name=self.name, key=f"/{self.name}", offset=0, byte_size=total), timeout=30)
            except grpc.RpcError as exc:
                raise InvalidInputError(f"{self.target}: registering system shared memory "
                                        f"failed: {exc.code().name}: {exc.details()}") from None

    def close(self) -> None:
        if self.registered and self.rest is not None:
            with contextlib.suppress(InvalidInputError):  # gone: nothing registered any more
                self.rest.unregister(self.name)
        elif self.registered:
            with grpc.insecure_channel(self.target) as channel:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                with contextlib.suppress(grpc.RpcError):  # gone: nothing registered any more
                    stub.SystemSharedMemoryUnregister(
                        pb.SystemSharedMemoryUnregisterRequest(name=self.name), timeout=30)
        self.registered = False
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None
