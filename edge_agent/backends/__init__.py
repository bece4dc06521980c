"""Inference backends behind one small interface; runtimes are imported lazily."""

from edge_agent.backends.base import Backend, BackendOptions
from edge_agent.backends.registry import (
    available_backends,
    backend_available,
    choose_backend,
    load_backend,
)

__all__ = [
    "Backend",
    "BackendOptions",
    "available_backends",
    "backend_available",
    "choose_backend",
    "load_backend",
]
