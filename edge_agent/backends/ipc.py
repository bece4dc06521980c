"""The wire between the agent and a runtime process: a small header, tensors in shared memory.

A message is a 4-byte little-endian header length and the header (``marshal`` of a dict: both
ends run the same interpreter, and it is ~5x cheaper than JSON), which lists each tensor as
``(name, dtype, shape, offset)``: the tensor's bytes are at ``offset`` in the sender's region
of a shared-memory file (memfd) both processes map, written there by the sender and read in
place by the receiver. Tensors that do not fit the region (or when there is none) travel on
the socket after the header, listed as ``(name, dtype, shape, -1)``, sent with one ``sendmsg``
and received straight into numpy arrays. Both ends are the agent's own processes on a
socketpair; nothing here is reachable from outside.

Per-message cost matters: a tiny model's execution is ~50 us, so the framing is kept to one
``sendmsg`` and usually one ``recv_into`` per message (measured in benchmarks/bench_isolation).
"""

from __future__ import annotations

import marshal
import math
import socket
import struct
from typing import Any

import numpy as np

from edge_agent import bytes_tensors
from edge_agent.errors import InvalidInputError

_LEN = struct.Struct("<I")
MAX_HEADER_BYTES = 1 << 20
_ALIGN = 64
_SCRATCH = 1 << 16


class WireError(Exception):
    """A message that does not follow the wire format (a bug, or a dying peer)."""


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) & -_ALIGN


class Channel:
    """One end of the socketpair, with the shared region it writes to and the one it reads.

    ``send`` and ``recv`` are not thread-safe; each end is used by one thread at a time.
    """

    def __init__(self, sock: socket.socket, *, outgoing: Any | None = None,
                 incoming: Any | None = None) -> None:
        self.sock = sock
        self.outgoing = outgoing
        self.incoming = incoming
        self._scratch = bytearray(_SCRATCH)
        self._view = memoryview(self._scratch)

    def close(self) -> None:
        """Close the socket (the regions belong to whoever mapped them)."""
        self._view.release()
        self.sock.close()

    def send(self, header: dict[str, Any], tensors: dict[str, np.ndarray] | None = None,
             ) -> None:
        """Send ``header`` and ``tensors`` (numeric dtypes only) as one message."""
        listing: list[tuple[str, str, tuple[int, ...], int]] = []
        buffers: list[memoryview] = []
        if tensors:
            region = self.outgoing
            shared = False
            if region is not None:
                total = 0
                for array in tensors.values():
                    total += _aligned(array.nbytes) if array.dtype.kind != "O" else 0
                shared = total <= len(region)
            pos = 0
            for name, array in tensors.items():
                dtype = array.dtype
                if dtype.kind == "O":  # BYTES: length-prefixed, the packed size after the shape
                    packed = pack_bytes(name, array)
                    listing.append((name, BYTES, (*array.shape, packed.nbytes), -1))
                    if packed.nbytes:
                        buffers.append(packed.data)
                    continue
                if dtype.kind in "US":
                    raise WireError(f"tensor {name!r} has dtype {dtype}: only numeric and "
                                    "bytes (object) tensors cross the process boundary")
                if shared and region is not None:
                    dst = np.frombuffer(region, dtype, array.size, pos)
                    np.copyto(dst.reshape(array.shape), array)
                    listing.append((name, dtype.str, array.shape, pos))
                    pos += _aligned(array.nbytes)
                    continue
                array = np.ascontiguousarray(array)
                listing.append((name, dtype.str, array.shape, -1))
                if array.nbytes:
                    buffers.append(array.reshape(-1).view(np.uint8).data)
        header["tensors"] = listing
        head = marshal.dumps(header)
        parts: list[Any] = [_LEN.pack(len(head)) + head, *buffers]
        sock = self.sock
        while parts:  # sendmsg may send less than everything for large tensors
            sent = sock.sendmsg(parts)
            while parts and sent >= len(parts[0]):
                sent -= len(parts[0])
                parts.pop(0)
            if parts and sent:
                parts[0] = memoryview(parts[0])[sent:]

    def recv(self, *, copy: bool = False) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Receive one message: its header and its tensors (EOFError when the peer is gone).

        Tensors the sender put in shared memory are views of it, valid until the next
        message, unless ``copy`` asks for arrays of the receiver's own.
        """
        sock, view = self.sock, self._view
        got = sock.recv_into(view, _SCRATCH)
        if got == 0:
            raise EOFError("the peer closed the connection")
        while got < _LEN.size:
            got += self._more(got)
        (length,) = _LEN.unpack_from(view)
        end = _LEN.size + length
        if length > MAX_HEADER_BYTES:
            raise WireError(f"message header of {length} bytes is over the limit")
        if end > _SCRATCH:
            head: bytearray | memoryview = bytearray(length)
            head[:got - _LEN.size] = view[_LEN.size:got]
            _recv_exactly(sock, memoryview(head)[got - _LEN.size:])
            extra = memoryview(b"")
        else:
            while got < end:
                got += self._more(got)
            head = view[_LEN.size:end]
            extra = view[end:got]  # inline tensor bytes that came with the header
        try:
            header = marshal.loads(head)
            listing = header.pop("tensors")
        except (ValueError, EOFError, TypeError, KeyError, AttributeError) as exc:
            raise WireError(f"malformed message header: {exc}") from exc
        tensors: dict[str, np.ndarray] = {}
        region = self.incoming
        for name, dtype, shape, pos in listing:
            if pos >= 0:
                if region is None:
                    raise WireError(f"tensor {name!r} is in shared memory, but none is mapped")
                array = np.frombuffer(region, dtype, math.prod(shape), pos).reshape(shape)
                tensors[name] = array.copy() if copy else array
                continue
            packed_bytes = dtype == BYTES
            if packed_bytes:  # the packed size is the listing's last shape entry
                array = np.empty(shape[-1], np.uint8)
                shape = tuple(shape[:-1])
            else:
                array = np.empty(shape, dtype)
            if array.nbytes:
                target = array.reshape(-1).view(np.uint8).data
                take = min(len(extra), len(target))
                target[:take] = extra[:take]
                extra = extra[take:]
                _recv_exactly(sock, target[take:])
            tensors[name] = unpack_bytes(name, array, shape) if packed_bytes else array
        if len(extra):
            raise WireError(f"{len(extra)} bytes after the message's last tensor")
        return header, tensors

    def _more(self, got: int) -> int:
        n = self.sock.recv_into(self._view[got:], _SCRATCH - got)
        if n == 0:
            raise EOFError("the peer closed the connection mid-message")
        return n


BYTES = "BYTES"
"""The listing's dtype of a bytes (object) tensor: its elements length-prefixed
(:mod:`edge_agent.bytes_tensors`), the packed size as the shape's last entry."""


def pack_bytes(name: str, array: np.ndarray) -> np.ndarray:
    """``array``'s elements length-prefixed in one uint8 array."""
    try:
        return np.frombuffer(bytes_tensors.encode(array, name), np.uint8)
    except InvalidInputError as exc:
        raise WireError(str(exc)) from None


def unpack_bytes(name: str, packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The object array of ``shape`` that :func:`pack_bytes` packed."""
    try:
        return bytes_tensors.decode(packed.data, shape, name)
    except InvalidInputError as exc:
        raise WireError(str(exc)) from None


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    while len(view):
        got = sock.recv_into(view, len(view), socket.MSG_WAITALL)
        if got == 0:
            raise EOFError("the peer closed the connection")
        view = view[got:]
