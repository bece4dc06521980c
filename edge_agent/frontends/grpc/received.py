"""The bytes of inference request messages the agent holds at once, and how a request's charges
travel from gRPC's deserializer to the thread that handles it.

Every admitted unary call's message, and every stream's next one, is received whole before any
handler sees it; the handler then holds it, parsed, until it answers. :class:`ReceiveBudget`
(``[grpc] max_receive_bytes_in_flight``) bounds the messages held that way: the deserializer
reserves a large message's size before parsing it, and a message beyond the budget is refused
(RESOURCE_EXHAUSTED, retryable), unparsed, its bytes dropped. HTTP/2 flow control
(:data:`RECEIVE_WINDOW`) keeps messages no handler has asked for with their
senders.

grpcio's sync server runs deserializers on its polling thread, not the handler's, so what the
deserializer reserved travels with the request as :class:`Received`; the handler's thread takes
it up (:meth:`Received.claim`) and gives it back when the call ends, or a stream when the
request is answered. A request dropped unclaimed (its call cancelled) gives its charges back.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from edge_agent.errors import QueueFullError
from edge_agent.frontends.common.typed_budget import HeldBudget
from edge_agent.frontends.grpc.typed_cost import SMALL

KEY = "grpc.max_receive_bytes_in_flight"
DEFAULT_MAX_RECEIVE_BYTES = 256 * 1024 * 1024
RECEIVE_WINDOW = (("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 64 * 1024))
"""HTTP/2 flow control that leaves a call's message with its sender until a handler asks for
it: each stream's window stays 64 KiB (no bandwidth-delay probing, which grew it until every
admitted call's whole message, up to ``max_message_bytes``, sat in the agent unread; issue 27:
32 x 57 MiB took +1.5 GiB before a handler saw one). A handler reading a message still gets
it at full speed (the window opens for the message being read)."""


class ReceiveBudget(HeldBudget):
    """Bytes of received inference request messages held at once, at most ``max_bytes``."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_RECEIVE_BYTES) -> None:
        super().__init__(max_bytes)

    def charge_message(self, nbytes: int) -> int:
        """Reserve a message of ``nbytes`` (0 when under typed_cost's SMALL, which admission
        bounds to a few MiB in all: not charged); the bytes reserved, or
        :class:`QueueFullError` naming the key."""
        if nbytes < SMALL:
            return 0
        self.reserve(nbytes, "")
        return nbytes

    def _refusal(self, nbytes: int, what: str) -> QueueFullError:
        mib = self.max_bytes / (1 << 20)
        return QueueFullError(
            f"the request's {nbytes / (1 << 20):.1f} MiB message would take the request "
            f"messages the agent holds past its {mib:g} MiB ({KEY}); not parsed: retry "
            "shortly, or send large tensors through shared memory")


class Received:
    """A request message with what the deserializer reserved for it, until a handler's thread
    claims it."""

    __slots__ = ("_charges", "message")

    def __init__(self, message: Any, charges: list[tuple[HeldBudget, int]]) -> None:
        self.message = message
        self._charges = charges

    def claim(self) -> Any:
        """The message; its charges are now held by the calling thread (given back by the
        budgets' ``release_held``/``take_held``)."""
        charges, self._charges = self._charges, []
        for budget, nbytes in charges:
            budget.hold(nbytes)
        return self.message

    def __del__(self) -> None:  # never claimed: the call ended before its handler ran
        for budget, nbytes in self._charges:
            budget.release(nbytes)


def claimed(request: Any) -> Any:
    """``request`` as handlers take it (a :class:`Received` claimed on this thread)."""
    return request.claim() if isinstance(request, Received) else request


def claim_each(requests: Iterator[Any]) -> Iterator[Any]:
    """A stream's requests, each claimed on the thread that reads it."""
    for request in requests:
        yield claimed(request)


class HeldBudgets:
    """The budgets a stream's reader thread holds charges of, handed on together."""

    def __init__(self, *budgets: HeldBudget | None) -> None:
        self.budgets = tuple(b for b in budgets if b is not None)

    def release_held(self) -> None:
        """Give back what this thread holds (the request was answered at once, or failed)."""
        for budget in self.budgets:
            budget.release_held()

    def hand_to(self, future: Future[Any]) -> None:
        """What this thread holds stays charged until ``future`` (the request's answer) is
        done."""
        for budget in self.budgets:
            if held := budget.take_held():
                future.add_done_callback(functools.partial(_give_back, budget, held))


def _give_back(budget: HeldBudget, nbytes: int, _done: Future[Any]) -> None:
    budget.release(nbytes)
