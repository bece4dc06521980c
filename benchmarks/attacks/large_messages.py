"""Many large request messages at once as a soak attack (issue 27, the typed-contents item's
memory target): the receive side, whatever the tensors' form.

Sixteen callers, each on a connection of its own, send without pause 32 MiB ModelInferRequests
of ``raw_input_contents`` (far more rows than the model takes, so each is refused
INVALID_ARGUMENT after it is received). Before ``[grpc] max_receive_bytes_in_flight`` the agent
took in every admitted call's whole message at once; now a few are received at a time and the
rest wait with their senders. Written as wire bytes (no protobuf message in this process).
"""

from __future__ import annotations

import threading

from benchmarks.attacks import Tally, Target, infer_until
from benchmarks.attacks.typed_contents import typed_request

CALLERS = 16
MESSAGE_BYTES = 32 << 20
COLS = 16


def raw_request(model: str, tensor: str, nbytes: int) -> bytes:
    """``nbytes`` of FP32 zeros as ``raw_input_contents``, declared [nbytes // 64, 16]."""
    rows = nbytes // (4 * COLS)
    return typed_request(model, tensor, "FP32", [rows, COLS], None, bytes(rows * COLS * 4))


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Send the raw request from :data:`CALLERS` callers at once until ``stop``."""
    payload = raw_request(target.model, "input", MESSAGE_BYTES)
    callers = [threading.Thread(target=infer_until,
                                args=(target, stop, tally, payload, "large raw"), daemon=True)
               for _ in range(CALLERS)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
