"""The host handle the serving core gives the backends it loads (``backends.base.Host``).

A backend that calls other models (a pipeline's steps, a Python model's ``ctx.infer``) gets
this at load, in its ``BackendOptions``; each call is a request to the data plane like a
client's, through the called model's own batcher. A nested call inherits its parent request's
caller (:class:`ParentCall`): when the client of the parent leaves (cancels, passes its
deadline, closes its connection), the children not yet run never run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future, InvalidStateError
from contextlib import AbstractContextManager, suppress
from typing import Any, Protocol

import numpy as np

from edge_agent.backends.base import HostedModel
from edge_agent.core.api import ModelConfigInfo
from edge_agent.core.decoupled import is_decoupled
from edge_agent.core.gate import ExecutionGate
from edge_agent.core.observer import RequestTrace, current_trace
from edge_agent.core.types import Caller, InferRequest, InferResult
from edge_agent.errors import RequestCancelledError


class _Serving(Protocol):
    """The data plane calls a host needs."""

    gate: ExecutionGate

    def infer(self, request: InferRequest, timeout_s: float | None = None) -> InferResult: ...

    def submit(self, request: InferRequest, *,
               inline: bool = True) -> Future[InferResult]: ...

    def stream(self, request: InferRequest) -> Iterator[InferResult]: ...

    def model_config(self, name: str, version: int | None = None) -> ModelConfigInfo: ...


class ParentCall:
    """A request whose model calls other models, as its nested calls see it: its trace (None:
    untraced) and its caller, whom every nested call inherits. The data plane puts it in the
    request's trace field, so the batcher makes it current on the thread of the execution
    (``observer.current_trace``); it passes the timestamps on to the real trace."""

    __slots__ = ("caller", "trace")

    def __init__(self, trace: RequestTrace | None, caller: Caller) -> None:
        self.trace = trace
        self.caller = caller

    def executed(self, **times: Any) -> None:
        if self.trace is not None:
            self.trace.executed(**times)

    def nested(self, model: str) -> RequestTrace:
        return ParentCall(None if self.trace is None else self.trace.nested(model), self.caller)

    def finished(self, *, ok: bool) -> None:
        if self.trace is not None:
            self.trace.finished(ok=ok)


def _parent() -> tuple[RequestTrace | None, Caller | None]:
    """This thread's running request: its real trace and its caller (each None if none)."""
    parent = current_trace()
    if isinstance(parent, ParentCall):
        return parent.trace, parent.caller
    return parent, None


class PlaneHost:
    """A :class:`~edge_agent.backends.base.Host` over one data plane."""

    __slots__ = ("_plane",)

    def __init__(self, plane: _Serving) -> None:
        self._plane = plane

    def _request(self, model: str, inputs: dict[str, np.ndarray], version: int | None,
                 outputs: list[str] | None) -> InferRequest:
        """A nested request under this thread's running request (traced as its child)."""
        trace, caller = _parent()
        return InferRequest(model=model, inputs=inputs, version=version, outputs=outputs,
                            caller=caller, trace=None if trace is None else trace.nested(model))

    def infer(self, model: str, inputs: dict[str, np.ndarray], version: int | None = None,
              outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Run one nested request on ``model``; raises AgentError subclasses. Under a traced
        request (this thread's current trace) the call is traced as its child."""
        request = self._request(model, inputs, version, outputs)
        trace = request.trace
        if trace is None:
            return self._plane.infer(request).outputs
        ok = False
        try:
            result = self._plane.infer(request).outputs
            ok = True
            return result
        finally:
            trace.finished(ok=ok)

    def submit(self, model: str, inputs: dict[str, np.ndarray], version: int | None = None,
               outputs: list[str] | None = None) -> Future[dict[str, np.ndarray]]:
        """Start one nested request on ``model`` on its batcher's threads; its future."""
        request = self._request(model, inputs, version, outputs)
        trace = request.trace
        try:
            started = self._plane.submit(request, inline=False)
        except BaseException:
            if trace is not None:
                trace.finished(ok=False)
            raise
        answer = _Nested(self._plane.gate)
        answer.add_done_callback(_cancelling(started))
        started.add_done_callback(_passing(answer, trace))
        return answer

    def stream(self, model: str, inputs: dict[str, np.ndarray],
               version: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """The responses of ``model`` to one nested request, as they are taken."""
        request = self._request(model, inputs, version, None)
        trace, caller = request.trace, request.caller
        ok = False
        try:
            responses = self._plane.stream(request)
            try:
                for result in responses:
                    if caller is not None and not caller.is_active():
                        raise RequestCancelledError(
                            f"model {model!r}: the request that streams from it was "
                            "cancelled by its caller; the stream is stopped")
                    yield result.outputs
            finally:
                close = getattr(responses, "close", None)
                if close is not None:
                    close()
            ok = True
        finally:
            if trace is not None:
                trace.finished(ok=ok)

    def waiting(self) -> AbstractContextManager[None]:
        """The calling execution's gate slot is given up for the body."""
        return self._plane.gate.yielded()

    def model_config(self, model: str, version: int | None = None) -> HostedModel:
        """How ``model`` is served now (ModelNotFoundError, ModelUnavailableError)."""
        manifest = self._plane.model_config(model, version).manifest
        return HostedModel(manifest=manifest, decoupled=is_decoupled(manifest))


class _Nested(Future[dict[str, np.ndarray]]):
    """A nested call's future: a thread that waits for it gives its gate slot up meanwhile,
    so that the call (or another the execution started) may take it."""

    def __init__(self, gate: ExecutionGate) -> None:
        super().__init__()
        self._gate = gate

    def result(self, timeout: float | None = None) -> dict[str, np.ndarray]:
        if not self.done():
            with self._gate.yielded():
                return super().result(timeout)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.done():
            with self._gate.yielded():
                return super().exception(timeout)
        return super().exception(timeout)


def _cancelling(started: Future[InferResult]) -> Callable[[Future[Any]], None]:
    """A done callback: when the answer is cancelled, so is the request (if still queued)."""
    def done(answer: Future[Any]) -> None:
        if answer.cancelled():
            started.cancel()
    return done


def _passing(answer: Future[dict[str, np.ndarray]],
             trace: RequestTrace | None) -> Callable[[Future[InferResult]], None]:
    """A done callback: the request's outputs (or error) to ``answer``."""
    def done(started: Future[InferResult]) -> None:
        try:
            outputs = started.result().outputs
        except CancelledError:
            error: BaseException | None = RequestCancelledError("the nested request was "
                                                                "cancelled")
        except BaseException as exc:
            error = exc
        else:
            error = None
        if trace is not None:
            trace.finished(ok=error is None)
        with suppress(InvalidStateError):  # the answer was cancelled
            if error is None:
                answer.set_result(outputs)
            else:
                answer.set_exception(error)
    return done
