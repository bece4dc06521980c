"""An in-memory backend for the unit layer: the agent's Backend protocol without a runtime.

A test double for unit tests of the serving core's logic (batcher, gate, validation); the
integration tests run real ONNX Runtime / OpenVINO models and never use it.

``y = x * scale`` over ``x`` FP32 [batch, 4] (or the specs given). ``hold`` makes every
execution wait until the test sets it (to build a queue behind a busy instance); ``fail_when``
makes the executions it picks raise BackendError. Every execution is recorded in ``calls``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edge_agent.backends.base import Cancellation
from edge_agent.errors import BackendError
from packager.bundle.manifest import TensorSpec

X = TensorSpec("x", "FP32", (-1, 4))
Y = TensorSpec("y", "FP32", (-1, 4))


@dataclass(frozen=True)
class Call:
    """One execution the fake backend ran."""

    rows: int
    instance: int
    execution: int
    first: float  # x[0, 0]: tells which request led the batch


class FakeBackend:
    """Implements :class:`edge_agent.backends.base.Backend` in memory."""

    name = "fake"
    device = "fake"
    cancellation = Cancellation.NONE

    def __init__(self, *, scale: float = 2.0, inputs: tuple[TensorSpec, ...] = (X,),
                 outputs: tuple[TensorSpec, ...] = (Y,), hold: threading.Event | None = None,
                 fail_when: Callable[[dict[str, np.ndarray]], bool] | None = None) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.scale = scale
        self.hold = hold
        self.fail_when = fail_when
        self.calls: list[Call] = []
        self.entered = threading.Semaphore(0)  # released once per execution that starts
        self.closed = False
        self._lock = threading.Lock()

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        first = inputs[self.inputs[0].name]
        with self._lock:
            self.calls.append(Call(rows=int(first.shape[0]) if first.ndim else 1,
                                   instance=instance, execution=execution,
                                   first=float(first.ravel()[0]) if first.size else 0.0))
        self.entered.release()
        if self.hold is not None and not self.hold.wait(60):
            raise BackendError("fake backend: held for 60 s, never released")
        if self.fail_when is not None and self.fail_when(inputs):
            raise BackendError("fake backend: failure asked for by the test")
        return {spec.name: (first * self.scale).astype(np.float32) for spec in self.outputs}

    def cancel(self, instance: int, execution: int) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    def wait_entered(self, n: int = 1, timeout: float = 60.0) -> None:
        """Wait until ``n`` more executions have started; AssertionError otherwise."""
        for _ in range(n):
            assert self.entered.acquire(timeout=timeout), "no execution started"
