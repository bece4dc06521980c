"""Automatic rollback: after a committed deploy, watch the new version's error rate.

One thread per watch. It ends when the window passes, when the version is no longer served, when
another deployment of the model begins (:meth:`ErrorRateWatchers.cancel`) or at close; when the
rate passes the threshold it calls the ``rollback`` hook given to the constructor once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from edge_agent.config.deploy import ManagerSettings
from edge_agent.core.deploy_port import DeployPort
from edge_agent.errors import AgentError

log = logging.getLogger(__name__)

RollbackHook = Callable[[str, int, str], None]
"""(model, version to go back to, reason)."""


class ErrorRateWatchers:
    """The running error-rate watches, at most one per model."""

    def __init__(self, plane: DeployPort, settings: Callable[[], ManagerSettings],
                 rollback: RollbackHook) -> None:
        self._plane = plane
        self._settings = settings
        self._rollback = rollback
        self._closed = threading.Event()
        self._guard = threading.Lock()
        self._stops: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []

    def watch(self, model: str, version: int, previous: int, dep: int) -> None:
        """Start watching ``version`` of ``model`` (deployed by ``dep``, replacing ``previous``)."""
        stop = threading.Event()
        t = threading.Thread(target=self._loop, args=(model, version, previous, dep, stop),
                             name=f"edge-watch-{model}-v{version}", daemon=True)
        with self._guard:
            old = self._stops.get(model)
            if old is not None:
                old.set()
            self._stops[model] = stop
            self._threads = [w for w in self._threads if w.is_alive()] + [t]
        t.start()

    def cancel(self, model: str) -> None:
        """Stop the watch of ``model`` (another deployment of it takes over)."""
        with self._guard:
            stop = self._stops.pop(model, None)
        if stop is not None:
            stop.set()

    def close(self) -> None:
        """Stop every watch and wait for the threads."""
        self._closed.set()
        with self._guard:
            threads = list(self._threads)
        for t in threads:
            t.join(5)

    def _stats(self, model: str, version: int) -> tuple[int, int] | None:
        try:
            mv = self._plane.resolve(model, version)
        except AgentError:
            return None
        s = mv.batcher.snapshot_stats()
        return s.success.count, s.fail.count

    def _loop(self, model: str, version: int, previous: int, dep: int,
              stop: threading.Event) -> None:
        s = self._settings()
        base = self._stats(model, version)
        started = time.monotonic()
        deadline = started + s.watch_window_s
        while base is not None and not self._closed.wait(0.2):
            if stop.is_set():
                return  # another deployment of the model took over
            now = self._stats(model, version)
            if now is None:
                return
            ok, failed = now[0] - base[0], now[1] - base[1]
            total = ok + failed
            if total >= s.min_requests and failed / total > s.error_threshold:
                reason = (f"automatic rollback: version {version} failed {failed} of {total} "
                          f"requests ({failed / total:.0%}, threshold {s.error_threshold:.0%}) "
                          f"within {time.monotonic() - started:.1f} s of deployment {dep}")
                log.warning("%s: %s", model, reason)
                try:
                    self._rollback(model, previous, reason)
                except AgentError as exc:
                    log.error("automatic rollback of %s failed: %s", model, exc)
                return
            if time.monotonic() >= deadline:
                return
