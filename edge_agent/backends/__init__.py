"""Inference backends behind one small interface, found through the ``edge_agent.backends``
entry points; runtimes are imported lazily."""

from edge_agent.backends.base import Backend, BackendOptions, BackendPlugin, Cancellation
from edge_agent.backends.registry import (
    available_backends,
    backend_available,
    backend_names,
    choose_backend,
    load_backend,
)

__all__ = [
    "Backend",
    "BackendOptions",
    "BackendPlugin",
    "Cancellation",
    "available_backends",
    "backend_available",
    "backend_names",
    "choose_backend",
    "load_backend",
]
