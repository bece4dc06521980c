"""Which data plane serves which models directory, for backends that call other models.

A pipeline (edge_agent/backends/pipeline_backend.py) is loaded like any backend, from its
version directory alone; it finds the data plane that serves the models next to it here.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_planes: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def _key(models_dir: Path) -> str:
    return str(Path(models_dir).resolve())


def register(models_dir: Path, plane: Any) -> None:
    """Record ``plane`` as the data plane serving ``models_dir`` (held weakly)."""
    with _lock:
        _planes[_key(models_dir)] = plane


def unregister(models_dir: Path, plane: Any) -> None:
    """Forget ``plane`` (when it still is the one recorded for ``models_dir``)."""
    with _lock:
        key = _key(models_dir)
        if _planes.get(key) is plane:
            del _planes[key]


def serving(models_dir: Path) -> Any | None:
    """The data plane serving ``models_dir``, or None."""
    with _lock:
        return _planes.get(_key(models_dir))
