"""Tensors and the serving signature of a bound function (PyTriton's ``Tensor`` shape)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from edge_agent.errors import AgentError
from packager.bundle.datatypes import datatype_of
from packager.bundle.function_signature import ATTRIBUTE, FunctionSignature, signature_of
from packager.bundle.manifest import DATATYPES, TensorSpec

__all__ = ["BindError", "Tensor", "attach", "make_signature", "signature", "signature_of"]

F = TypeVar("F", bound=Callable[..., Any])


class BindError(AgentError):
    """A function could not be bound: a bad tensor, name or option (the message says which)."""


@dataclass(frozen=True)
class Tensor:
    """One input or output: its name, numpy dtype (``np.bytes_``/``object`` for BYTES; a KServe
    datatype such as ``"FP32"`` works too) and shape without the batch dim (-1: any size)."""

    name: str
    dtype: Any = np.float32
    shape: tuple[int, ...] = (-1,)
    optional: bool = False

    def spec(self) -> TensorSpec:
        """The manifest's TensorSpec (BindError for a dtype no KServe datatype has)."""
        if not self.name or not isinstance(self.name, str):
            raise BindError(f"every Tensor needs a name (got {self.name!r})")
        if self.optional:
            raise BindError(f"tensor {self.name!r}: optional inputs are not served yet (every "
                            "declared input is required); declare it required, or leave it "
                            "out and fill it in the function")
        datatype = self.dtype if isinstance(self.dtype, str) and self.dtype in DATATYPES \
            else _datatype(self.name, self.dtype)
        shape = tuple(int(d) for d in self.shape)
        if any(d == 0 or d < -1 for d in shape):
            raise BindError(f"tensor {self.name!r}: shape {list(shape)} has a dim that is not "
                            "positive or -1")
        return TensorSpec(self.name, datatype, shape)


def _datatype(name: str, dtype: Any) -> str:
    if dtype in (bytes, str, object):
        return "BYTES"
    try:
        found = datatype_of(np.dtype(dtype))
    except TypeError:
        found = None
    if found is None:
        raise BindError(f"tensor {name!r}: dtype {dtype!r} has no KServe datatype; use a "
                        "numpy number or bool dtype, np.bytes_ or object (BYTES)")
    return found


def specs(tensors: Sequence[Tensor | TensorSpec], what: str) -> tuple[TensorSpec, ...]:
    """Checked TensorSpecs of ``tensors`` (``what``: "inputs" or "outputs")."""
    if not tensors:
        raise BindError(f"{what} is empty: list at least one Tensor")
    out = tuple(t.spec() if isinstance(t, Tensor) else t for t in tensors)
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise BindError(f"{what} name a tensor twice: {names}")
    return out


def make_signature(inputs: Sequence[Tensor | TensorSpec],
                   outputs: Sequence[Tensor | TensorSpec], *,
                   max_batch_size: int = 0, decoupled: bool = False,
                   max_queue_delay_us: int = 0, preferred_batch_sizes: Sequence[int] = (),
                   instances: int = 1) -> FunctionSignature:
    """A checked FunctionSignature; BindError naming the first problem."""
    if max_batch_size < 0:
        raise BindError(f"max_batch_size {max_batch_size} is negative (0: no batching)")
    if max_queue_delay_us < 0 or instances < 1:
        raise BindError("max_queue_delay_us must be >= 0 and instances >= 1")
    bad = [p for p in preferred_batch_sizes if p < 1 or p > max_batch_size]
    if bad:
        raise BindError(f"preferred_batch_sizes {bad} are outside 1..max_batch_size "
                        f"({max_batch_size})")
    return FunctionSignature(specs(inputs, "inputs"), specs(outputs, "outputs"),
                             max_batch_size=max_batch_size, decoupled=decoupled,
                             max_queue_delay_us=max_queue_delay_us,
                             preferred_batch_sizes=tuple(preferred_batch_sizes),
                             instances=instances)


def signature(*, inputs: Sequence[Tensor], outputs: Sequence[Tensor], max_batch_size: int = 0,
              decoupled: bool = False, max_queue_delay_us: int = 0,
              preferred_batch_sizes: Sequence[int] = (),
              instances: int = 1) -> Callable[[F], F]:
    """Decorate a function with what it serves, so ``bind(name, fn)`` and ``edge-pack build
    MODULE:FUNCTION`` read its tensors and batching from the function itself. Put it above
    (outside) the PyTriton-style decorators."""
    found = make_signature(inputs, outputs, max_batch_size=max_batch_size, decoupled=decoupled,
                           max_queue_delay_us=max_queue_delay_us,
                           preferred_batch_sizes=preferred_batch_sizes, instances=instances)

    def decorate(fn: F) -> F:
        setattr(fn, ATTRIBUTE, found)
        return fn

    return decorate


def attach(fn: Callable[..., Any], found: FunctionSignature) -> None:
    """Record ``found`` on ``fn`` (bind does: ``edge-pack spec`` then reads it)."""
    with contextlib.suppress(AttributeError, TypeError):  # a builtin: nothing to record
        setattr(fn, ATTRIBUTE, found)

