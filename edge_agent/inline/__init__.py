"""Serve a Python function in a few lines, PyTriton's way, and ship it from the same code.

    from edge_agent.inline import FunctionServer, Tensor, batch

    @batch
    def infer(x):
        return {"y": x * 2}

    with FunctionServer(address="127.0.0.1:8001") as server:
        server.bind("double", infer, inputs=[Tensor("x", np.float32, (4,))],
                    outputs=[Tensor("y", np.float32, (4,))], max_batch_size=64)
        server.serve()

``@signature(inputs=..., outputs=..., max_batch_size=...)`` records the tensors on the function
itself: ``bind("double", infer)`` then needs no more, and ``edge-pack build module:infer``
builds a bundle that serves it on a device. See docs/migrate-from-pytriton.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edge_agent.inline.decorators import (
    batch,
    fill_optionals,
    first_value,
    group_by_values,
    sample,
)
from edge_agent.inline.signature import BindError, Tensor, signature

if TYPE_CHECKING:
    from edge_agent.inline.server import FunctionServer, serve_command

__all__ = ["BindError", "FunctionServer", "Tensor", "batch", "fill_optionals", "first_value",
           "group_by_values", "sample", "serve_command", "signature"]


def __getattr__(name: str) -> Any:
    # the server (gRPC, the agent's composition) loads on first use: a bundle's code that
    # imports the decorators on a device stays light
    if name in ("FunctionServer", "serve_command"):
        from edge_agent.inline import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
