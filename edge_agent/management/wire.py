"""The edge.agent.v1 wire conventions both directions share: sentinels for absent values,
and the line a refused connection reads.

proto3 scalars have no "unset"; the API sends ``NONE`` for an absent version or number and
``NO_TEMP`` for an absent temperature.
"""

from __future__ import annotations

NONE = -1
NO_TEMP = -1000.0
REFUSED = b"edge-agent refused this connection: "
"""What a connection the management port refuses reads first (then the reason and a newline;
:mod:`edge_agent.management.gate` writes it, clients show it)."""


def opt(v: float | None, none: float = NONE) -> float:
    """``v``, or the sentinel ``none`` when absent (agent -> message)."""
    return none if v is None else v


def back(v: float, none: float = NONE) -> float | None:
    """``v``, or None when it is the sentinel ``none`` (message -> client value)."""
    return None if v == none else v

CALLER_METADATA = "x-edge-caller"
"""Call metadata a management client describes itself in (``user@host (edge-console 1.4)``):
named in the device log with each change; a claim, not an identity."""
