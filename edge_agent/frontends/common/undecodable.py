"""A request that could not be decoded, as the servers' safe deserializers hand it on, and the
one check that refuses it.

No protocol or gRPC imports: the inference server's handlers and converters and the management
API's authentication layer all refuse through :meth:`Undecodable.refused` (one log line per
burst, never a traceback; the caller gets INVALID_ARGUMENT with the reason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from edge_agent.errors import AgentError, InvalidInputError
from edge_agent.logthrottle import LogThrottle

__all__ = ["Undecodable", "safe_deserializer"]

log = logging.getLogger(__name__)
_throttle = LogThrottle(log)


class Undecodable:
    """What the server's deserializer returns for bytes that are not a valid request message
    (so the call gets INVALID_ARGUMENT with the reason, and no traceback is logged)."""

    model_name = model_version = id = ""

    def __init__(self, message_type: str, reason: str) -> None:
        self.message_type = message_type
        self.reason = reason

    def error(self) -> AgentError:
        """The error the caller gets."""
        return InvalidInputError(f"the request is not a valid {self.message_type} message "
                                 f"({self.reason[:200]})")

    def refused(self, method: str, peer: str) -> AgentError:
        """Log the refusal (rate-limited, no traceback) and return the error the caller gets."""
        # one budget per method: a flood on one (say the management API's) never hides
        # another's first lines
        _throttle.warning(f"undecodable {method}", "refused an undecodable %s call from %s: %s",
                          method, peer, self.reason[:200])
        return self.error()


class RefusedUnread(Undecodable):
    """What a deserializer hands on, unparsed, for a request refused from its framing or its
    size (a budget, a cap): the call gets ``refusal`` itself."""

    def __init__(self, message_type: str, refusal: AgentError) -> None:
        super().__init__(message_type, str(refusal))
        self.refusal = refusal

    def error(self) -> AgentError:
        return self.refusal

    def refused(self, method: str, peer: str) -> AgentError:
        return self.refusal


def safe_deserializer(deserialize: Callable[[bytes], Any] | None
                      ) -> Callable[[bytes], Any] | None:
    """``deserialize`` (a protobuf ``FromString``) that returns an :class:`Undecodable` instead
    of raising: gRPC would log a traceback per call, for anyone who can reach the port."""
    if deserialize is None:
        return None
    owner = getattr(deserialize, "__self__", None)
    name = str(getattr(getattr(owner, "DESCRIPTOR", None), "full_name", "request"))

    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:
            return Undecodable(name, str(exc) or type(exc).__name__)

    return decode
