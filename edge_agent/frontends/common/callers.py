"""The :class:`~edge_agent.core.types.Caller` handles the front ends give the core, so that a
request whose caller left is dropped from the queue and never run.

A gRPC unary call's ``ServicerContext`` is a Caller as it is (its ``add_callback`` fires when
the call is cancelled or its deadline passes, and the core then takes the request out of the
queue at once). Stream requests and HTTP connections are
:class:`~edge_agent.core.types.PolledCaller`: the core asks ``is_active`` when an instance
comes to the request.
"""

from __future__ import annotations

import select
import socket

from edge_agent.core.types import PolledCaller

__all__ = ["PolledCaller", "connection_caller"]


def connection_caller(sock: socket.socket) -> PolledCaller:
    """The caller on the other end of an HTTP connection: gone once it closed the connection
    (a peek that reads end of file or fails; bytes of a next request mean it is still there).
    A client that half-closes its side after sending counts as gone."""

    def is_active() -> bool:
        # poll first: a socket with a timeout waits for data inside recv, whatever its flags
        poller = select.poll()
        try:
            poller.register(sock, select.POLLIN)
            if not poller.poll(0):
                return True  # nothing to read: still connected
            return sock.recv(1, socket.MSG_PEEK) != b""
        except (OSError, ValueError):  # reset, or closed here
            return False

    return PolledCaller(is_active)
