"""Decoupled models: one request, many responses (Triton's decoupled transaction policy).

A Python model whose spec says ``decoupled = true`` is a generator; each output dict it yields
is one response. Its backend offers ``stream(inputs, instance, execution)`` (an iterator of
output dicts) besides ``infer``. Requests to it do not batch: each takes a free instance for as
long as it streams, and its responses are produced as the caller takes them (the stream's
sender), so a slow caller slows only its own request. Unary inference is refused
(:class:`DecoupledModelError`), as Triton refuses ModelInfer on such a model.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from edge_agent.core.observer import RequestTrace, swap_trace
from edge_agent.core.types import Caller, InferResult
from edge_agent.errors import (
    AgentError,
    BackendError,
    DecoupledModelError,
    ModelUnavailableError,
    RequestCancelledError,
    RequestTimeoutError,
)
from packager.bundle.manifest import Manifest

__all__ = ["DecoupledModelError", "DecoupledRunner", "StreamingBackend", "is_decoupled"]


class StreamingBackend(Protocol):
    """A backend that can run a decoupled model."""

    def stream(self, inputs: dict[str, np.ndarray], instance: int = 0,
               execution: int = 0) -> Iterator[dict[str, np.ndarray]]: ...

    def cancel(self, instance: int, execution: int) -> bool: ...


def is_decoupled(manifest: Manifest) -> bool:
    """Whether ``manifest``'s model streams its responses (``decoupled = true``)."""
    return manifest.decoupled


class DecoupledRunner:
    """Runs the requests of one decoupled model version, one per free instance.

    ``response_timeout_s`` (the model's execution timeout) bounds the wait for each response;
    an overdue one cancels the execution (a runtime process is killed and replaced) and the
    stream answers DEADLINE_EXCEEDED."""

    def __init__(self, backend: Any, *, model: str, version: int, instances: int,
                 response_timeout_s: float = 0.0) -> None:
        if not callable(getattr(backend, "stream", None)):
            raise BackendError(f"model {model!r} version {version} is decoupled, but its "
                               f"backend ({getattr(backend, 'name', '?')}) cannot stream")
        self._backend: StreamingBackend = backend
        self.model, self.version = model, version
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(max(1, instances)):
            self._free.put(i)
        self._ids = itertools.count(1)
        self._timeout_s = response_timeout_s  # per response; 0: none
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._inflight = 0
        self._closed = False

    def refusal(self) -> DecoupledModelError:
        """The error unary inference on this model answers."""
        return DecoupledModelError(
            f"model {self.model!r} version {self.version} is decoupled (it streams many "
            "responses to one request): call it with ModelStreamInfer (tritonclient: "
            "start_stream and async_stream_infer), not ModelInfer")

    def stream(self, inputs: dict[str, np.ndarray], request_id: str = "",
               caller: Caller | None = None,
               parent: RequestTrace | None = None) -> Iterator[InferResult]:
        """The responses to one request, produced as they are taken; closing the iterator
        early stops the model's generator and frees its instance. A request whose ``caller``
        is gone by the time an instance is free never starts (RequestCancelledError).
        ``parent`` is made the running trace while the model produces each response, so the
        models it calls inherit its caller (and are cancelled with it)."""
        with self._lock:
            if self._closed:
                raise ModelUnavailableError(
                    f"model {self.model!r} version {self.version} is unloading; retry to "
                    "reach the current version")
            self._inflight += 1
        return self._run(inputs, request_id, caller, parent)

    def _run(self, inputs: dict[str, np.ndarray], request_id: str,
             caller: Caller | None, parent: RequestTrace | None) -> Iterator[InferResult]:
        try:
            instance = self._free.get()  # waits while every instance streams
        except BaseException:
            self._done()
            raise
        if caller is not None and not caller.is_active():
            self._free.put(instance)
            self._done()
            raise RequestCancelledError(
                f"model {self.model!r} version {self.version}: request "
                f"{request_id or '(no id)'} was cancelled by its caller before it started; "
                "it was not run")
        execution = next(self._ids)
        responses = self._backend.stream(inputs, instance, execution)
        timed_out = threading.Event()
        try:
            while True:
                timer = self._watch(instance, execution, timed_out)
                outer = swap_trace(parent) if parent is not None else None
                try:
                    outputs = next(responses)
                except StopIteration:
                    return
                except AgentError as exc:
                    raise self._failed(exc, timed_out.is_set()) from exc
                finally:
                    if parent is not None:
                        swap_trace(outer)
                    if timer is not None:
                        timer.cancel()
                # the time the caller takes a response does not count against the model
                yield InferResult(model=self.model, version=self.version, outputs=outputs,
                                  id=request_id)
        finally:
            close = getattr(responses, "close", None)
            if close is not None:
                close()  # a caller that went away stops the model's generator
            self._free.put(instance)
            self._done()

    def _watch(self, instance: int, execution: int,
               timed_out: threading.Event) -> threading.Timer | None:
        """A timer cancelling the execution when its next response is overdue."""
        if self._timeout_s <= 0:
            return None

        def fire() -> None:
            timed_out.set()
            self._backend.cancel(instance, execution)

        timer = threading.Timer(self._timeout_s, fire)
        timer.daemon = True
        timer.start()
        return timer

    def _failed(self, exc: AgentError, timed_out: bool) -> AgentError:
        label = f"model {self.model!r} version {self.version}"
        if timed_out:
            return RequestTimeoutError(
                f"{label}: no response within the execution timeout ({self._timeout_s:g} s); "
                "the execution was cancelled (a runtime process is killed and replaced)")
        if isinstance(exc, BackendError) and repr(self.model) not in str(exc):
            return type(exc)(f"{label}: {exc}")
        return exc

    def _done(self) -> None:
        with self._lock:
            self._inflight -= 1
            self._drained.notify_all()

    def close(self, drain_timeout_s: float | None = 30.0) -> bool:
        """Refuse new requests and wait up to ``drain_timeout_s`` for the streams in flight
        (a stream never started counts until it is closed); True when they all ended."""
        with self._lock:
            self._closed = True
            return self._drained.wait_for(lambda: self._inflight <= 0, drain_timeout_s)
