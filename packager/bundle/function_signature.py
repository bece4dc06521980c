"""The serving signature a Python function carries (``edge_agent.inline``): its tensors,
batching and streaming, read back by ``edge-pack spec``/``build MODULE:FUNCTION``.

Both sides import this module: the agent's in-code API writes the signature onto the function
(``fn.__edge_signature__``), the packager reads it from the imported module, so the bundle
serves the function with the tensors it was bound with. Standard library and the manifest's
``TensorSpec`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packager.bundle.manifest import TensorSpec

ATTRIBUTE = "__edge_signature__"
"""The attribute of a function that holds its :class:`FunctionSignature`."""

CALLING_REQUESTS = "requests"
"""``backend_options.python.calling`` of a function called PyTriton's way: a list of requests
(name -> array), answered by a list of output dicts (``edge_agent.inline`` decorators)."""
CALLING_CONTEXT = "context"
"""The default calling: ``fn(inputs, ctx) -> outputs`` over the whole batch."""


@dataclass(frozen=True)
class FunctionSignature:
    """What a bound function serves. Tensor shapes exclude the batch dim (PyTriton's
    ``Tensor.shape``); ``max_batch_size`` 0: no batch dim, requests served one at a time."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int = 0
    decoupled: bool = False
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 1

    def batched(self, specs: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
        """``specs`` as a manifest lists them: a leading -1 batch dim when batched."""
        if self.max_batch_size <= 0:
            return specs
        return tuple(TensorSpec(t.name, t.datatype, (-1, *t.shape)) for t in specs)


def signature_of(fn: Callable[..., Any]) -> FunctionSignature | None:
    """The signature ``fn`` was bound or decorated with, or None."""
    found = getattr(fn, ATTRIBUTE, None)
    return found if isinstance(found, FunctionSignature) else None
