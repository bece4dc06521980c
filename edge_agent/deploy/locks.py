"""One non-blocking lock per model: a second change while one runs is refused, never queued."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from edge_agent.deploy.errors import DeploymentBusyError


class ModelLocks:
    """Serializes changes to one model (deploy, activate, rollback, remove, load, unload)."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def hold(self, model: str) -> Iterator[None]:
        """Hold ``model``'s lock for the block; DeploymentBusyError when another change runs."""
        with self._guard:
            lock = self._locks.setdefault(model, threading.Lock())
        if not lock.acquire(blocking=False):
            raise DeploymentBusyError(f"a deployment of {model!r} is in progress; wait for it "
                                      "to finish")
        try:
            yield
        finally:
            lock.release()
