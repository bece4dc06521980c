"""Who asked for the change under way: the device log's answer to "who changed what, when".

The management API sets the caller (the console's own description of itself, from the
``x-edge-caller`` call metadata, and the peer address) around each change it runs; the deployment
journal reads it when a deployment begins and names it in the log. A change the agent makes by
itself (an automatic rollback, a reload at start) has no caller and says so.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

MAX_CALLER_CHARS = 120

_caller: contextvars.ContextVar[str] = contextvars.ContextVar("edge_caller",
                                                              default="the agent itself")


def describe(claimed: str | None, peer: str) -> str:
    """``'alice@laptop (edge-console 1.4)' from 127.0.0.1:5123``: what the caller says it is
    (printable characters only, cut to MAX_CALLER_CHARS; it is a claim, not an identity: the
    token or certificate is the proof) and the address it called from."""
    address = peer.removeprefix("ipv4:").removeprefix("ipv6:")
    text = "".join(c for c in (claimed or "") if c.isprintable())[:MAX_CALLER_CHARS].strip()
    return f"{text!r} from {address}" if text else f"a caller from {address}"


@contextlib.contextmanager
def acting_as(who: str) -> Iterator[None]:
    """Changes begun inside (on this thread, or in a context copied from it) name ``who``."""
    token = _caller.set(who)
    try:
        yield
    finally:
        _caller.reset(token)


def current() -> str:
    """The caller of the change under way ("the agent itself" outside any call)."""
    return _caller.get()
