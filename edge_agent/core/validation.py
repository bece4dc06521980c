"""Checking a request against a model version's signature before it is queued."""

from __future__ import annotations

import numpy as np

from edge_agent.core.types import InferRequest
from edge_agent.errors import InvalidInputError
from packager.bundle.datatypes import numpy_dtype
from packager.bundle.manifest import TensorSpec


class Signature:
    """The precomputed expectations of one model version (names, dtypes, ranks, fixed dims)."""

    __slots__ = ("_inputs", "_label", "_output_names", "batched", "max_batch_size")

    def __init__(self, model: str, version: int, inputs: tuple[TensorSpec, ...],
                 outputs: tuple[TensorSpec, ...], max_batch_size: int) -> None:
        self._label = f"model {model!r} version {version}"
        self.max_batch_size = max_batch_size
        self.batched = max_batch_size > 0
        # name -> (spec, numpy dtype, rank, ((axis, size), ...) fixed dims checked per request)
        self._inputs: dict[str, tuple[TensorSpec, np.dtype, int, tuple[tuple[int, int], ...]]] = {}
        for spec in inputs:
            first = 1 if self.batched else 0
            fixed = tuple((axis, size) for axis, size in enumerate(spec.shape)
                          if axis >= first and size >= 0)
            self._inputs[spec.name] = (spec, numpy_dtype(spec.datatype), len(spec.shape), fixed)
        self._output_names = frozenset(t.name for t in outputs)

    def validate(self, request: InferRequest) -> int:
        """Check ``request`` and return its row count (1 for an unbatched model).

        Raises InvalidInputError naming the model, the tensor and what was expected.
        """
        given = request.inputs
        expected = self._inputs
        if not given:
            raise InvalidInputError(
                f"{self._label}: the request has no inputs; expected {self._describe()}")
        if len(given) != len(expected) or any(n not in expected for n in given):
            self._name_error(given)
        rows = -1
        for name, array in given.items():
            spec, dtype, rank, fixed = expected[name]
            if type(array) is not np.ndarray and not isinstance(array, np.ndarray):
                raise InvalidInputError(
                    f"{self._label}: input {name!r} must be a numpy array, "
                    f"got {type(array).__name__}")
            if array.dtype != dtype and not (dtype.kind == "O" and array.dtype.kind in "OSU"):
                raise InvalidInputError(
                    f"{self._label}: input {name!r} has datatype {array.dtype} but the model "
                    f"expects {spec.datatype} ({dtype})")
            shape = array.shape
            if len(shape) != rank:
                raise InvalidInputError(
                    f"{self._label}: input {name!r} has shape {list(shape)} (rank {len(shape)}) "
                    f"but the model expects rank {rank}: {list(spec.shape)}")
            for axis, size in fixed:
                if shape[axis] != size:
                    raise InvalidInputError(
                        f"{self._label}: input {name!r} has shape {list(shape)} but dim {axis} "
                        f"must be {size} (expected {list(spec.shape)}, -1 is free)")
            if self.batched:
                n = shape[0]
                if rows < 0:
                    rows = n
                elif n != rows:
                    raise InvalidInputError(
                        f"{self._label}: inputs disagree on the batch size (dim 0): input "
                        f"{name!r} has {n} rows, another input has {rows}")
        if self.batched:
            if rows < 1:
                raise InvalidInputError(f"{self._label}: the request has 0 rows (dim 0)")
            if rows > self.max_batch_size:
                raise InvalidInputError(
                    f"{self._label}: the request has {rows} rows but max_batch_size is "
                    f"{self.max_batch_size}; split it into smaller requests")
        else:
            rows = 1
        if request.outputs is not None:
            unknown = [n for n in request.outputs if n not in self._output_names]
            if unknown:
                raise InvalidInputError(
                    f"{self._label}: requested outputs {unknown} are unknown; the model has "
                    f"outputs {sorted(self._output_names)}")
        return rows

    def _describe(self) -> str:
        return ", ".join(f"{s.name} {s.datatype} {list(s.shape)}"
                         for s, _, _, _ in self._inputs.values())

    def _name_error(self, given: dict[str, np.ndarray]) -> None:
        unknown = sorted(n for n in given if n not in self._inputs)
        missing = sorted(n for n in self._inputs if n not in given)
        parts = []
        if missing:
            parts.append(f"missing inputs {missing}")
        if unknown:
            parts.append(f"unknown inputs {unknown}")
        raise InvalidInputError(
            f"{self._label}: {' and '.join(parts)}; expected exactly {self._describe()}")
