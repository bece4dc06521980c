"""The wire between the agent and a runtime process: a JSON header, tensors in shared memory.

A message is a 4-byte little-endian header length and the JSON header, which lists each tensor
as ``[name, dtype, shape, offset]``: the tensor's bytes are at ``offset`` in the sender's
region of a shared-memory file (memfd) both processes map, written there by the sender and
read in place by the receiver. Tensors that do not fit the region (or when there is none)
travel on the socket after the header, listed as ``[name, dtype, shape]``, sent with one
``sendmsg`` and received straight into numpy arrays. Both ends are the agent's own processes
on a socketpair; nothing here is reachable from outside.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import numpy as np

_LEN = struct.Struct("<I")
MAX_HEADER_BYTES = 1 << 20
_ALIGN = 64


class WireError(Exception):
    """A message that does not follow the wire format (a bug, or a dying peer)."""


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def send_message(sock: socket.socket, header: dict[str, Any],
                 tensors: dict[str, np.ndarray] | None = None,
                 region: Any | None = None) -> None:
    """Send ``header`` and ``tensors`` (numeric dtypes only) as one message.

    ``region`` (a writeable buffer shared with the receiver) takes the tensors when they fit.
    """
    tensors = tensors or {}
    for name, array in tensors.items():
        if array.dtype.kind in "OUS":
            raise WireError(f"tensor {name!r} has dtype {array.dtype}: only numeric tensors "
                            "cross the process boundary")
    listing: list[list[Any]] = []
    buffers: list[Any] = []
    shared = region is not None and \
        sum(_aligned(a.nbytes) for a in tensors.values()) <= len(region)
    pos = 0
    for name, array in tensors.items():
        if shared:
            dst = np.frombuffer(region, array.dtype, array.size, pos).reshape(array.shape)
            np.copyto(dst, array)
            listing.append([name, array.dtype.str, list(array.shape), pos])
            pos += _aligned(array.nbytes)
            continue
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


def recv_message(sock: socket.socket, region: Any | None = None, *, copy: bool = False,
                 ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Receive one message: its header and its tensors (raises EOFError when the peer is gone).

    Tensors the sender put in ``region`` are views of it, valid until the next message, unless
    ``copy`` asks for arrays of the receiver's own.
    """
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
    for name, dtype, shape, *where in listing:
        if where:
            if region is None:
                raise WireError(f"tensor {name!r} is in shared memory, but none is mapped")
            count = int(np.prod(shape, dtype=np.int64))
            array = np.frombuffer(region, np.dtype(dtype), count, where[0]).reshape(shape)
            tensors[name] = array.copy() if copy else array
            continue
        array = np.empty(shape, np.dtype(dtype))
        if array.nbytes:
            _recv_exactly(sock, memoryview(array.reshape(-1).view(np.uint8)))
        tensors[name] = array
    return header, tensors
