"""Triton's trace settings, global and per model, and the sampling they decide.

Answered as Triton answers them: every value is a list of strings; a model's settings that were
never set follow the global ones; an update names only the settings it changes, and a setting
given no value (``None`` over HTTP, an empty list over gRPC) is cleared (a model's falls back to
the global one, a global one to its value at start). ``trace_count`` counts down as traces are
taken (-1: no limit) and reports what is left.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from edge_agent.config.trace import TraceConfig, trace_levels, trace_number
from edge_agent.errors import TraceSettingError

SERVED = ("trace_level", "trace_rate", "trace_count", "trace_mode")
NOT_SERVED = {
    "trace_file": "traces are exported through OpenTelemetry to [trace] otlp_endpoint in "
                  "agent.toml, never to a file",
    "log_frequency": "traces are exported through OpenTelemetry as they finish (batched by the "
                     "exporter), never logged to files",
}
MODE = "opentelemetry"


@dataclass(frozen=True, slots=True)
class Levels:
    """One scope's settings; None: follows the global one (a model's)."""

    trace_level: tuple[str, ...] | None = None
    trace_rate: int | None = None
    trace_count: int | None = None


class _Scope:
    """A scope's settings with its sampling counter (under the settings' lock)."""

    __slots__ = ("levels", "seen")

    def __init__(self, levels: Levels) -> None:
        self.levels = levels
        self.seen = 0


class TraceSettings:
    """The global and per-model trace settings (thread-safe)."""

    def __init__(self, config: TraceConfig) -> None:
        self._initial = Levels(config.trace_level, config.trace_rate, config.trace_count)
        self._global = _Scope(self._initial)
        self._models: dict[str, _Scope] = {}
        self._lock = threading.Lock()
        self.active = False
        """Whether any scope traces (read unlocked on the hot path)."""
        self._refresh()

    # -- the trace extension -------------------------------------------------------------

    def get(self, model: str = "") -> dict[str, list[str]]:
        """The settings of ``model`` ("" global) as Triton reports them."""
        with self._lock:
            levels = self._effective(model)
        return {"trace_level": list(levels.trace_level or ()),
                "trace_rate": [str(levels.trace_rate)],
                "trace_count": [str(levels.trace_count)],
                "trace_mode": [MODE]}

    def update(self, model: str, settings: Mapping[str, Sequence[str] | None],
               *, can_export: str = "") -> dict[str, list[str]]:
        """Apply ``settings`` (name -> values; None or [] clears) to ``model`` ("" global) and
        return its settings after. ``can_export``: why spans cannot be exported (refuses a
        level other than OFF); TraceSettingError names the setting at fault."""
        where = f"trace setting of model '{model}'" if model else "global trace setting"
        changes: dict[str, Any] = {}
        for name, values in settings.items():
            if name in NOT_SERVED:
                raise TraceSettingError(f"{where} '{name}' is not served: {NOT_SERVED[name]}")
            if name not in SERVED:
                raise TraceSettingError(f"{where} '{name}' is unknown; this agent serves "
                                        f"{list(SERVED)}")
            if values is not None and (isinstance(values, str) or not all(
                    isinstance(v, str) for v in values)):
                raise TraceSettingError(f"{where} '{name}': expected a list of strings, got "
                                        f"{values!r}")
            changes[name] = _parsed(name, list(values or ()), f"{where} '{name}'")
        with self._lock:
            scope = self._models.get(model) if model else self._global
            if scope is None:  # a model's first settings start from the global ones
                scope = self._models[model] = _Scope(Levels())
            levels = scope.levels
            for name, value in changes.items():
                if name == "trace_mode":
                    continue
                if value is None and not model:
                    value = getattr(self._initial, name)
                levels = replace(levels, **{name: value})
            after = self._effective(model, levels)
            if after.trace_level != ("OFF",) and can_export:
                raise TraceSettingError(f"{where} 'trace_level' {list(after.trace_level or ())} "
                                        f"cannot be served: {can_export}")
            scope.levels = levels
            self._refresh()
        return self.get(model)

    # -- sampling (the hot path while tracing is on) -------------------------------------

    def sample(self, model: str) -> tuple[str, ...] | None:
        """The levels to trace this request of ``model`` at, or None (not sampled)."""
        with self._lock:
            scope = self._models.get(model)
            levels = self._effective(model)
            if levels.trace_level == ("OFF",) or levels.trace_count == 0:
                return None
            # the counters live where the setting is: a model's own rate or the global one
            counter = scope if scope is not None and scope.levels.trace_rate is not None \
                else self._global
            counter.seen += 1
            if (counter.seen - 1) % (levels.trace_rate or 1):
                return None
            owner = scope if scope is not None and scope.levels.trace_count is not None \
                else self._global
            count = owner.levels.trace_count
            if count is not None and count > 0:
                owner.levels = replace(owner.levels, trace_count=count - 1)
                if count == 1:
                    self._refresh()
            return levels.trace_level

    def _effective(self, model: str, levels: Levels | None = None) -> Levels:
        g = self._global.levels
        if levels is None:
            scope = self._models.get(model) if model else None
            levels = scope.levels if scope is not None else g
        return Levels(levels.trace_level or g.trace_level,
                      levels.trace_rate if levels.trace_rate is not None else g.trace_rate,
                      levels.trace_count if levels.trace_count is not None else g.trace_count)

    def _refresh(self) -> None:
        self.active = any(
            lv.trace_level != ("OFF",) and lv.trace_count != 0
            for lv in [self._effective("")] + [self._effective(m) for m in self._models])


def _parsed(name: str, values: list[str], where: str) -> Any:
    """A setting's value from its strings (None: cleared)."""
    if not values:
        return None
    try:
        if name == "trace_level":
            return trace_levels(values, where)
        if len(values) != 1:
            raise ValueError(f"{where}: expected one value, got {values!r}")
        if name == "trace_mode":
            if values[0].lower() != MODE:
                raise ValueError(f"{where}: this agent traces only in mode '{MODE}' "
                                 f"(OpenTelemetry), got {values[0]!r}")
            return MODE
        return trace_number(values[0], name, where)
    except ValueError as exc:
        raise TraceSettingError(str(exc)) from None
