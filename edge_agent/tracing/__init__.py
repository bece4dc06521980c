"""Triton's trace extension at the edge: settings, sampling, and OpenTelemetry spans.

The serving core only reports a traced request's timestamps to the ``RequestTrace`` the front
end attached (:mod:`edge_agent.core.observer`); this package decides which requests are traced
(:mod:`.settings`) and turns the timestamps into spans (:mod:`.spans`). Off by default: while
no scope traces, a front end's only cost is reading :attr:`Tracing.active`. docs/tracing.md.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from edge_agent.config.trace import TraceConfig, otlp_traces_url
from edge_agent.tracing.settings import TraceSettings

if TYPE_CHECKING:
    from edge_agent.tracing.spans import Exporter, RootTrace

__all__ = ["Tracing"]


class Tracing:
    """The agent's tracing: one per agent, shared by both front ends."""

    def __init__(self, config: TraceConfig | None = None) -> None:
        self.config = config or TraceConfig()
        self.settings = TraceSettings(self.config)
        self._exporter: Exporter | None = None
        self._closed = False
        self._lock = threading.Lock()
        if self.settings.active:
            self._export()  # tracing on from the start: a missing package fails the start

    @property
    def active(self) -> bool:
        """Whether any request may be traced now (the hot path's one check)."""
        return self.settings.active

    def get(self, model: str = "") -> dict[str, list[str]]:
        """Triton's TraceSetting answer for ``model`` ("" global)."""
        return self.settings.get(model)

    def update(self, model: str, settings: Mapping[str, Sequence[str] | None]
               ) -> dict[str, list[str]]:
        """Change ``model``'s ("" global) settings; TraceSettingError names what is wrong."""
        after = self.settings.update(model, settings, can_export=self._cannot_export())
        if self.settings.active:
            self._export()
        return after

    def start(self, model: str, *, traceparent: str | None = None, request_id: str = "",
              protocol: str = "") -> RootTrace | None:
        """The root trace of a request of ``model`` when it is sampled, else None."""
        levels = self.settings.sample(model)
        if levels is None or self._closed:
            return None
        attributes: dict[str, Any] = {"model.name": model, "rpc.system": protocol}
        if request_id:
            attributes["request.id"] = request_id
        return self._export().root(f"infer {model}", traceparent, levels, attributes)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export every finished span now (True when nothing is left)."""
        exporter = self._exporter
        return exporter.flush(timeout_s) if exporter is not None else True

    def close(self) -> None:
        """Export what is left and stop exporting."""
        with self._lock:
            exporter, self._exporter, self._closed = self._exporter, None, True
        if exporter is not None:
            exporter.close()

    def _cannot_export(self) -> str:
        if self.config.otlp_endpoint is None:
            return ("no collector is configured: set [trace] otlp_endpoint = "
                    "\"http://127.0.0.1:4318\" in agent.toml and restart the agent")
        from edge_agent.tracing.spans import otel_missing

        return otel_missing()

    def _export(self) -> Exporter:
        with self._lock:
            if self._exporter is None:
                from edge_agent.tracing.spans import Exporter

                endpoint = self.config.otlp_endpoint
                if endpoint is None:
                    from edge_agent.errors import TraceSettingError

                    raise TraceSettingError(self._cannot_export())
                self._exporter = Exporter(otlp_traces_url(endpoint, "trace.otlp_endpoint"))
            return self._exporter
