"""The wire between the agent and a runtime process: a JSON header and raw tensor buffers.

A message is a 4-byte little-endian header length, the JSON header, then one raw buffer per
tensor the header lists as ``[name, dtype, shape]``. It is sent with one ``sendmsg`` (no copy
of the tensors into a frame) and tensors are received straight into freshly allocated numpy
arrays, so each tensor is copied once per direction and the receiver's arrays are its own
and writeable. Both ends are the agent's own processes on a socketpair; nothing here is
reachable from outside.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import numpy as np

_LEN = struct.Struct("<I")
MAX_HEADER_BYTES = 1 << 20


class WireError(Exception):
    """A message that does not follow the wire format (a bug, or a dying peer)."""


def send_message(sock: socket.socket, header: dict[str, Any],
                 tensors: dict[str, np.ndarray] | None = None) -> None:
    """Send ``header`` and ``tensors`` (numeric dtypes only) as one message."""
    listing: list[list[Any]] = []
    buffers: list[Any] = []
    for name, array in (tensors or {}).items():
        if array.dtype.kind in "OUS":
            raise WireError(f"tensor {name!r} has dtype {array.dtype}: only numeric tensors "
                            "cross the process boundary")
        array = np.ascontiguousarray(array)
        listing.append([name, array.dtype.str, list(array.shape)])
        if array.nbytes:
            buffers.append(memoryview(array.reshape(-1).view(np.uint8)))
    head = json.dumps({**header, "tensors": listing}).encode()
    parts = [memoryview(_LEN.pack(len(head)) + head), *buffers]
    while parts:  # sendmsg may send less than everything for large tensors
        sent = sock.sendmsg(parts)
        while parts and sent >= len(parts[0]):
            sent -= len(parts[0])
            parts.pop(0)
        if parts and sent:
            parts[0] = parts[0][sent:]


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    while len(view):
        got = sock.recv_into(view, len(view), socket.MSG_WAITALL)
        if got == 0:
            raise EOFError("the peer closed the connection")
        view = view[got:]


def recv_message(sock: socket.socket) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Receive one message: its header and its tensors (raises EOFError when the peer is gone)."""
    size = bytearray(_LEN.size)
    _recv_exactly(sock, memoryview(size))
    (length,) = _LEN.unpack(size)
    if length > MAX_HEADER_BYTES:
        raise WireError(f"message header of {length} bytes is over the limit")
    head = bytearray(length)
    _recv_exactly(sock, memoryview(head))
    try:
        header = json.loads(head)
        listing = header.pop("tensors", [])
    except (ValueError, AttributeError) as exc:
        raise WireError(f"malformed message header: {exc}") from exc
    tensors: dict[str, np.ndarray] = {}
    for name, dtype, shape in listing:
        array = np.empty(shape, np.dtype(dtype))
        if array.nbytes:
            _recv_exactly(sock, memoryview(array.reshape(-1).view(np.uint8)))
        tensors[name] = array
    return header, tensors
