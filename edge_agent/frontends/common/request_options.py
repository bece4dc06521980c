"""Triton's request options -> what a request asks for: one parser for both front ends.

KServe/Triton requests carry options as ``parameters`` at three places: on the request, on
each input and on each requested output. Both front ends (gRPC ``InferParameter`` maps, turned
into plain values by :func:`parameter_values`, and HTTP JSON objects) pass them through here,
so the same request is served or refused the same way whatever protocol it came over.

The rule: an option this agent serves is applied; every other one is refused with an
InvalidInputError (INVALID_ARGUMENT / 400) naming each such parameter and why. Nothing is
ignored, so a client never gets an answer with a meaning it did not ask for. The tables below
are the whole list; the wire-specific ones (HTTP's binary tensor data, gRPC's empty final
stream response) are served on their protocol only.

No gRPC or HTTP here (it moves with the front ends' shared pieces).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from edge_agent.config.models import MAX_PRIORITY_VALUE
from edge_agent.core.types import SequenceFlags
from edge_agent.errors import InvalidInputError

Protocol = Literal["grpc", "http"]
BOTH: frozenset[Protocol] = frozenset(("grpc", "http"))
HTTP: frozenset[Protocol] = frozenset(("http",))
GRPC: frozenset[Protocol] = frozenset(("grpc",))

CLASSIFICATION = "classification"
"""Output parameter: answer the top-N classes instead of the tensor (the classification
extension)."""

SHARED_MEMORY = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")

REQUEST_OPTIONS: Mapping[str, frozenset[Protocol]] = {
    "priority": BOTH,
    "timeout": BOTH,
    "binary_data_output": HTTP,
    "triton_enable_empty_final_response": GRPC,
    "sequence_id": BOTH,
    "sequence_start": BOTH,
    "sequence_end": BOTH,
}
"""Request parameters served, and over which protocol (the sequence ones for stateful models
only: a stateless model refuses them, :mod:`edge_agent.core.sequences`)."""

INPUT_OPTIONS: Mapping[str, frozenset[Protocol]] = {
    **{key: BOTH for key in SHARED_MEMORY},
    "binary_data_size": HTTP,
}
"""Input tensor parameters served."""

OUTPUT_OPTIONS: Mapping[str, frozenset[Protocol]] = {
    **{key: BOTH for key in SHARED_MEMORY},
    "binary_data": HTTP,
    CLASSIFICATION: BOTH,
}
"""Requested output tensor parameters served."""

_SEQUENCE = ("sequence_id", "sequence_start", "sequence_end")

MAX_SEQUENCE_ID_BYTES = 256
"""Longest string sequence id accepted."""

REFUSED: Mapping[str, str] = {
    "binary_data_output": "binary tensor data is HTTP's; gRPC always answers raw contents",
    "binary_data": "binary tensor data is HTTP's; gRPC always answers raw contents",
    "binary_data_size": "binary tensor data is HTTP's; send the tensor in "
                        "raw_input_contents",
    "triton_enable_empty_final_response": "streaming responses are served over gRPC "
                                          "(ModelStreamInfer) only",
}
"""Known Triton options the agent does not serve (on a protocol, or at all), with why."""


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What a request's own parameters ask for."""

    priority: int = 0
    """1 is the highest; 0: the model's."""
    timeout_us: int | None = None
    """None: the model's default queue timeout."""
    binary_data_output: bool = False
    """HTTP: every output not named in ``outputs`` is answered as binary data."""
    empty_final_response: bool = False
    """gRPC streams: an empty response flagged final follows a decoupled model's last."""
    sequence: SequenceFlags | None = None
    """A stateful model's request: its sequence id and START/END flags."""


DEFAULTS = RequestOptions()


def parameter_values(params: Mapping[str, Any]) -> dict[str, Any]:
    """A gRPC parameter map (``InferParameter`` values) as plain Python values; a parameter
    with no value set is None."""
    values: dict[str, Any] = {}
    for key, p in params.items():
        kind = p.WhichOneof("parameter_choice")
        values[key] = getattr(p, kind) if kind else None
    return values


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sequence(params: Mapping[str, Any]) -> SequenceFlags | None:
    """The request's sequence (None: sequence_id absent, 0 or ""; Triton's clients send the
    flags only with an id); InvalidInputError for a wrong value."""
    seq = params.get("sequence_id")
    if seq in (0, "", None) and not isinstance(seq, bool):
        if params.get("sequence_start") or params.get("sequence_end"):
            raise InvalidInputError("request parameters 'sequence_start' and 'sequence_end' "
                                    "need a non-zero or non-empty 'sequence_id'")
        return None
    if _integer(seq):
        if not 0 < seq < 2**64:
            raise InvalidInputError("request parameter 'sequence_id' must be a uint64 or a "
                                    "string")
    elif not isinstance(seq, str) or len(seq.encode()) > MAX_SEQUENCE_ID_BYTES:
        raise InvalidInputError(f"request parameter 'sequence_id' must be a uint64 or a "
                                f"string of at most {MAX_SEQUENCE_ID_BYTES} bytes")
    flags = [params.get(key, False) for key in ("sequence_start", "sequence_end")]
    if not all(isinstance(f, bool) for f in flags):
        raise InvalidInputError("request parameters 'sequence_start' and 'sequence_end' must "
                                "be true or false")
    return SequenceFlags(seq, start=flags[0], end=flags[1])


def _refusals(params: Mapping[str, Any], served: Mapping[str, frozenset[Protocol]],
              protocol: Protocol) -> list[str]:
    """"'a', 'b' (why)" for each reason some parameters are refused, in the order given."""
    by_reason: dict[str, list[str]] = {}
    for key in params:
        if protocol in served.get(key, ()):
            continue
        by_reason.setdefault(REFUSED.get(key, "unknown parameter"), []).append(f"'{key[:64]}'")
    return [f"{', '.join(keys)} ({reason})" for reason, keys in by_reason.items()]


def _refuse(where: str, refusals: list[str], served: Mapping[str, frozenset[Protocol]],
            protocol: Protocol) -> None:
    if refusals:
        listed = ", ".join(sorted(k for k, p in served.items() if protocol in p))
        raise InvalidInputError(
            f"{where}: parameters not served by this agent: {'; '.join(refusals)}. "
            f"Served here: {listed}")


def parse_request(params: Mapping[str, Any], protocol: Protocol, model: str) -> RequestOptions:
    """The options a request's ``parameters`` (plain values) ask for; InvalidInputError naming
    every parameter not served, and any served one with a wrong value."""
    if not params:
        return DEFAULTS
    where = f"request for model '{model}'"
    _refuse(where, _refusals(params, REQUEST_OPTIONS, protocol), REQUEST_OPTIONS,
            protocol)
    priority = params.get("priority", 0)
    if not _integer(priority) or not 0 <= priority <= MAX_PRIORITY_VALUE:
        raise InvalidInputError(f"request parameter 'priority' must be an integer from 0 (the "
                                f"model's) to {MAX_PRIORITY_VALUE}; 1 is the highest")
    timeout = params.get("timeout", 0)
    if not _integer(timeout) or timeout < 0:
        raise InvalidInputError("request parameter 'timeout' must be an integer >= 0 "
                                "(microseconds)")
    flags = {}
    for key in ("binary_data_output", "triton_enable_empty_final_response"):
        flags[key] = params.get(key, False)
        if not isinstance(flags[key], bool):
            raise InvalidInputError(f"request parameter '{key}' must be true or false")
    return RequestOptions(priority=priority, timeout_us=timeout or None,
                          binary_data_output=flags["binary_data_output"],
                          empty_final_response=flags["triton_enable_empty_final_response"],
                          sequence=_sequence(params))


def check_input(params: Mapping[str, Any], protocol: Protocol, name: str) -> None:
    """InvalidInputError naming every parameter of input ``name`` not served."""
    if params:
        _refuse(f"input '{name}'", _refusals(params, INPUT_OPTIONS, protocol),
                INPUT_OPTIONS, protocol)


def check_output(params: Mapping[str, Any], protocol: Protocol, name: str) -> int:
    """The class count output ``name`` asks for (0: the tensor itself); InvalidInputError
    naming every parameter not served."""
    if not params:
        return 0
    _refuse(f"output '{name}'", _refusals(params, OUTPUT_OPTIONS, protocol),
            OUTPUT_OPTIONS, protocol)
    count = params.get(CLASSIFICATION, 0)
    if not _integer(count) or count < 0:
        raise InvalidInputError(f"output '{name}': parameter '{CLASSIFICATION}' must be an "
                                "integer >= 0 (the number of classes to answer)")
    if count and any(key in params for key in SHARED_MEMORY):
        raise InvalidInputError(f"output '{name}': a classification output cannot be placed "
                                "in shared memory; ask for one or the other")
    return int(count)
