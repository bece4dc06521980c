"""Issue 27's typed-contents amplification as a soak attack, and the wire it sends.

Two callers send, without pause, ModelInferRequests whose values are typed contents that cost
the agent many times their wire size once parsed: ``int64_contents`` of 1-byte zeros (8 bytes
each parsed, declared INT64 to an FP32 model) and ``bytes_contents`` of 2-byte elements (a
Python object each). The agent must refuse both (RESOURCE_EXHAUSTED naming
``agent.max_typed_input_mib``, or INVALID_ARGUMENT for the datatype) without its memory
following. The messages are written as wire bytes here (building them through protobuf would
cost this process what it costs the agent).
"""

from __future__ import annotations

import threading

from benchmarks.attacks import Tally, Target, infer_until

INT64_VALUES = 16 << 20  # 16 MiB on the wire, 128 MiB parsed
BYTES_ELEMENTS = 4 << 20  # 16 MiB on the wire, ~400 MiB parsed and converted
_LENGTH = 2


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """One length-delimited field."""
    return _varint(number << 3 | _LENGTH) + _varint(len(data)) + data


def typed_request(model: str, tensor: str, datatype: str, shape: list[int],
                  contents: bytes | None, raw: bytes | None = None) -> bytes:
    """The wire bytes of a ModelInferRequest with one input whose InferTensorContents are
    ``contents`` (already encoded fields; None: no contents), and ``raw`` as its
    raw_input_contents when given."""
    dims = b"".join(_varint(d) for d in shape)
    tensor_msg = (_field(1, tensor.encode()) + _field(2, datatype.encode()) + _field(3, dims)
                  + (_field(5, contents) if contents is not None else b""))
    return _field(1, model.encode()) + _field(5, tensor_msg) + \
        (_field(7, raw) if raw is not None else b"")


def int64_request(model: str, tensor: str, values: int, cols: int = 16) -> bytes:
    """``values`` zeros in packed ``int64_contents`` (1 byte each), declared INT64
    [values // cols, cols]."""
    return typed_request(model, tensor, "INT64", [values // cols, cols],
                         _field(3, bytes(values // cols * cols)))


def bytes_request(model: str, tensor: str, elements: int) -> bytes:
    """``elements`` 2-byte strings in ``bytes_contents``, declared BYTES [elements]."""
    return typed_request(model, tensor, "BYTES", [elements], _field(8, b"ab") * elements)


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Send the int64 and the BYTES requests, one caller each, until ``stop``."""
    callers = [threading.Thread(target=infer_until, args=(target, stop, tally, payload, kind),
                                daemon=True)
               for kind, payload in (("int64", int64_request(target.model, "input",
                                                             INT64_VALUES)),
                                     ("bytes", bytes_request(target.model, "input",
                                                             BYTES_ELEMENTS)))]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
