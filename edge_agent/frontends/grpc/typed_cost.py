"""What a ModelInferRequest's typed contents will cost in memory, read from its wire bytes
before they are parsed.

Parsing is where typed contents amplify: a packed ``int64_contents`` value of 1 byte on the
wire is 8 bytes in the parsed message (and up to twice that while its array grows), a BYTES
element of 2 bytes is a 16-byte view plus, once converted, a Python object. This module walks
the message's framing (the request's inputs, each input's contents; never the values one by
one, except BYTES elements, up to a cap) and returns the bytes that parsing and converting will
take, so the deserializer can charge them to the
:class:`~edge_agent.frontends.common.typed_budget.TypedBudget` first. A request without typed
contents costs nothing here (raw contents cost their size and are not charged).
"""

from __future__ import annotations

import numpy as np

from edge_agent.errors import InvalidInputError
from edge_agent.frontends.common.tensors import MAX_TENSORS
from edge_agent.frontends.common.typed_budget import BYTES_OBJECT
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from packager.bundle.datatypes import FIXED_SIZE

SMALL = 64 * 1024
"""Messages smaller than this are not charged (their worst case is a few MiB per call)."""
MAX_WALKED = 4096
"""Fields read one by one per message at most; the rest is charged at the worst rate."""
WORST_PER_BYTE = 25
"""The most memory one wire byte of typed contents can take (a 1-byte int64 varint: 16 parsed,
8 converted, 1 on the wire)."""
BYTES_PARSED = 32
"""Parsed-message bytes per BYTES element besides its data (measured: 24 to 31)."""

_field = pb.ModelInferRequest.DESCRIPTOR.fields_by_name
_tensor = pb.ModelInferRequest.InferInputTensor.DESCRIPTOR.fields_by_name
_contents = pb.InferTensorContents.DESCRIPTOR.fields_by_name
_INPUTS = _field["inputs"].number
_OUTPUTS = _field["outputs"].number
_DATATYPE = _tensor["datatype"].number
_CONTENTS = _tensor["contents"].number
_BYTES = _contents["bytes_contents"].number
_VARINT_PARSED = {_contents[name].number: size * 2 for name, size in (
    ("bool_contents", 1), ("int_contents", 4), ("uint_contents", 4),
    ("int64_contents", 8), ("uint64_contents", 8))}
"""Varint fields: parsed bytes per value (twice the value's size: the array grows by doubling)."""
_FIXED_SIZE = {_contents["fp32_contents"].number: 4, _contents["fp64_contents"].number: 8}
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_CHUNK = 1 << 20


class TooManyTensors(Exception):
    """The request names more inputs or outputs than MAX_TENSORS (found while walking, before
    parsing): the converter would refuse it unread, so it is refused unparsed."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind

    def refusal(self) -> InvalidInputError:
        """The error the caller gets (the converter's, without the count it did not make)."""
        what = "give each input the model has once" if self.kind == "inputs" \
            else "name each output the model has once"
        return InvalidInputError(f"the request names more than {MAX_TENSORS} {self.kind}; "
                                 f"at most {MAX_TENSORS} are accepted: {what}")


class _Malformed(Exception):
    """Framing this walk does not follow (the parser will refuse it, or it is charged at the
    worst rate)."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        try:
            byte = buf[pos]
        except IndexError:
            raise _Malformed from None
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Malformed


def _skip(buf: bytes, pos: int, wire: int) -> tuple[int, int]:
    """(start, end) of the field value at ``pos`` of wire type ``wire``."""
    if wire == _VARINT:
        return pos, _varint(buf, pos)[1]
    if wire == _FIXED64:
        return pos, pos + 8
    if wire == _FIXED32:
        return pos, pos + 4
    if wire == _LENGTH:
        size, start = _varint(buf, pos)
        return start, start + size
    raise _Malformed  # groups: not in this protocol


class _Walk:
    """One message's walk: the fields read so far, against :data:`MAX_WALKED`."""

    def __init__(self, data: bytes) -> None:
        self.buf = data
        self.view = memoryview(data)
        self.fields = 0
        self.unwalked = 0

    def fields_of(self, start: int, end: int, stop: dict[int, int] | None = None,
                  ) -> list[tuple[int, int, int, int]]:
        """(number, wire type, value start, value end) of the fields in ``[start, end)``; past
        :data:`MAX_WALKED` fields the rest is not read but charged at the worst rate. ``stop``
        counts the fields of its numbers: TooManyTensors once one passes MAX_TENSORS."""
        out = []
        pos, buf = start, self.buf
        while pos < end:
            self.fields += 1
            if self.fields > MAX_WALKED:
                self.unwalked += end - pos
                break
            key = buf[pos]  # one-byte keys and lengths inline: BYTES elements are many
            if key < 0x80 and key & 7 == _LENGTH and pos + 1 < end and buf[pos + 1] < 0x80:
                begin = pos + 2
                pos = begin + buf[pos + 1]
            else:
                key, pos = _varint(buf, pos)
                begin, pos = _skip(buf, pos, key & 7)
            if pos > end:
                raise _Malformed
            out.append((key >> 3, key & 7, begin, pos))
            if stop is not None and (key >> 3) in stop:
                stop[key >> 3] += 1
                if stop[key >> 3] > MAX_TENSORS:
                    raise TooManyTensors("inputs" if key >> 3 == _INPUTS else "outputs")
        return out

    def varints(self, start: int, end: int) -> int:
        """The varints packed in ``[start, end)``: the bytes that end one (high bit clear),
        counted a chunk at a time (a mask of the whole field would cost its size again)."""
        return sum(int(np.count_nonzero(
            np.frombuffer(self.view[at:min(at + _CHUNK, end)], np.uint8) < 0x80))
            for at in range(start, end, _CHUNK))

    def contents(self, start: int, end: int, itemsize: int) -> int:
        """The parsed and converted bytes of one input's contents."""
        cost = 0
        for number, wire, begin, stop in self.fields_of(start, end):
            size = stop - begin
            if number == _BYTES and wire == _LENGTH:
                cost += BYTES_PARSED + BYTES_OBJECT + 2 * size
            elif number in _VARINT_PARSED:
                count = 1 if wire != _LENGTH else self.varints(begin, stop)
                cost += count * (_VARINT_PARSED[number] + itemsize)
            elif number in _FIXED_SIZE:
                count = size // _FIXED_SIZE[number]
                cost += size + count * itemsize
            else:  # an unknown field: kept as its bytes
                cost += size
        return cost


def _itemsize(datatype: bytes) -> int:
    dtype = FIXED_SIZE.get(datatype.decode("utf-8", "replace"))
    return dtype.itemsize if dtype is not None else 8


def typed_cost(data: bytes) -> int:
    """The bytes that parsing and converting the typed contents of ModelInferRequest ``data``
    will take (its wire bytes included); 0 when it has none or is small. TooManyTensors when
    it names more than MAX_TENSORS inputs or outputs (the walk stops there)."""
    if len(data) < SMALL:
        return 0
    walk = _Walk(data)
    cost = 0
    typed = False
    named = {_INPUTS: 0, _OUTPUTS: 0}
    try:
        for number, wire, begin, end in walk.fields_of(0, len(data), stop=named):
            if number != _INPUTS or wire != _LENGTH:
                continue
            tensor = walk.fields_of(begin, end)
            datatype = next((walk.buf[b:e] for n, w, b, e in tensor
                             if n == _DATATYPE and w == _LENGTH), b"")
            for n, w, b, e in tensor:
                if n == _CONTENTS and w == _LENGTH and e > b:
                    typed = True
                    cost += walk.contents(b, e, _itemsize(datatype))
    except _Malformed:  # framing not walked: charge the message at the worst rate
        return len(data) * WORST_PER_BYTE
    if walk.unwalked:
        return len(data) + cost + walk.unwalked * WORST_PER_BYTE
    return len(data) + cost if typed else 0
