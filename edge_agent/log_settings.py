"""The agent's log settings, read and changed at run time (Triton's logging extension).

The settings and their meaning are Triton's: ``log_info``, ``log_warning``, ``log_error``
(booleans: whether lines of that level reach the log output), ``log_verbose_level`` (an integer;
above 0, DEBUG lines too), ``log_format`` (``"default"`` or ``"ISO8601"``: a leading timestamp)
and ``log_file`` (always ``""``: the agent logs to stderr, which systemd's journal keeps; another
file is refused, not ignored). They act on the process's stderr handlers; the in-memory ring that
``edge-console logs`` reads keeps INFO and up whatever they say, so an operator who turns INFO
off on the console still has the device's record of what happened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from edge_agent.errors import InvalidInputError

FORMATS = {
    "default": "%(levelname)s %(name)s: %(message)s",
    "ISO8601": "%(asctime)s %(levelname)s %(name)s: %(message)s",
}
ISO8601_DATE = "%Y-%m-%dT%H:%M:%S"
ALIASES = {"log_warnings": "log_warning", "log_errors": "log_error"}  # Triton's docs spell these
TYPES: dict[str, type] = {"log_file": str, "log_info": bool, "log_warning": bool,
                          "log_error": bool, "log_verbose_level": int, "log_format": str}


def _output_handlers() -> list[logging.Handler]:
    """The root logger's stream handlers (stderr), not the ring (a subclass of Handler only)."""
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]


class LogSettings:
    """The current settings of this process's log output; one instance per agent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        level = min((h.level for h in _output_handlers()), default=logging.WARNING)
        level = level or logging.getLogger().level
        self._values: dict[str, Any] = {
            "log_file": "", "log_info": level <= logging.INFO,
            "log_warning": level <= logging.WARNING, "log_error": level <= logging.ERROR,
            "log_verbose_level": 1 if level <= logging.DEBUG else 0, "log_format": "default"}

    def current(self) -> dict[str, Any]:
        """Every setting and its value."""
        with self._lock:
            return dict(self._values)

    def update(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Apply ``changes`` (all of them or none) and return every setting; InvalidInputError
        names an unknown setting, a value of the wrong type, or one the agent does not serve."""
        checked: dict[str, Any] = {}
        for raw_key, value in changes.items():
            key = ALIASES.get(raw_key, raw_key)
            expected = TYPES.get(key)
            if expected is None:
                raise InvalidInputError(f"log setting '{raw_key}' is unknown; the settings are "
                                        f"{', '.join(TYPES)}")
            if expected is int and isinstance(value, str) and value.isdigit():
                value = int(value)  # Triton's HTTP clients send numbers as strings too
            if expected is bool and isinstance(value, str) and value in ("true", "false"):
                value = value == "true"
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise InvalidInputError(f"log setting '{raw_key}' takes a "
                                        f"{expected.__name__}, not {value!r}")
            if key == "log_file" and value:
                raise InvalidInputError("log setting 'log_file' is not served: the agent logs "
                                        "to stderr (kept by systemd's journal) and to the ring "
                                        "`edge-console logs` reads; leave it empty")
            if key == "log_format" and value not in FORMATS:
                raise InvalidInputError(f"log setting 'log_format' must be one of "
                                        f"{', '.join(FORMATS)}, not {value!r}")
            if key == "log_verbose_level" and isinstance(value, int) and value < 0:
                raise InvalidInputError("log setting 'log_verbose_level' must be >= 0")
            checked[key] = value
        with self._lock:
            self._values.update(checked)
            self._apply()
            return dict(self._values)

    def _apply(self) -> None:
        v = self._values
        if v["log_verbose_level"] > 0:
            level = logging.DEBUG
        elif v["log_info"]:
            level = logging.INFO
        elif v["log_warning"]:
            level = logging.WARNING
        elif v["log_error"]:
            level = logging.ERROR
        else:
            level = logging.CRITICAL + 1
        # the root passes INFO on whatever the output says (the ring keeps it); DEBUG only
        # when asked for
        logging.getLogger().setLevel(logging.DEBUG if level == logging.DEBUG else logging.INFO)
        formatter = logging.Formatter(FORMATS[v["log_format"]],
                                      datefmt=ISO8601_DATE if v["log_format"] == "ISO8601"
                                      else None)
        for handler in _output_handlers():
            handler.setLevel(level)
            handler.setFormatter(formatter)
