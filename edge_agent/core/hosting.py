"""The host handle the serving core gives the backends it loads (``backends.base.Host``).

A backend that calls other models (a pipeline's steps, a Python model's ``ctx.infer``) gets
this at load, in its ``BackendOptions``; each call is a request to the data plane like a
client's, through the called model's own batcher.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from edge_agent.backends.base import HostedModel
from edge_agent.core.api import ModelConfigInfo
from edge_agent.core.decoupled import is_decoupled
from edge_agent.core.observer import current_trace
from edge_agent.core.types import InferRequest, InferResult


class _Serving(Protocol):
    """The two data plane calls a host needs."""

    def infer(self, request: InferRequest, timeout_s: float | None = None) -> InferResult: ...

    def model_config(self, name: str, version: int | None = None) -> ModelConfigInfo: ...


class PlaneHost:
    """A :class:`~edge_agent.backends.base.Host` over one data plane."""

    __slots__ = ("_plane",)

    def __init__(self, plane: _Serving) -> None:
        self._plane = plane

    def infer(self, model: str, inputs: dict[str, np.ndarray], version: int | None = None,
              outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Run one nested request on ``model``; raises AgentError subclasses. Under a traced
        request (this thread's current trace) the call is traced as its child."""
        parent = current_trace()
        if parent is None:
            request = InferRequest(model=model, inputs=inputs, version=version, outputs=outputs)
            return self._plane.infer(request).outputs
        trace = parent.nested(model)
        ok = False
        try:
            result = self._plane.infer(InferRequest(model=model, inputs=inputs, version=version,
                                                    outputs=outputs, trace=trace)).outputs
            ok = True
            return result
        finally:
            trace.finished(ok=ok)

    def model_config(self, model: str, version: int | None = None) -> HostedModel:
        """How ``model`` is served now (ModelNotFoundError, ModelUnavailableError)."""
        manifest = self._plane.model_config(model, version).manifest
        return HostedModel(manifest=manifest, decoupled=is_decoupled(manifest))
