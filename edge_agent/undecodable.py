"""A request that could not be decoded, as the servers' safe deserializers hand it on.

A leaf module (no protocol or gRPC imports): both the inference server and the management
API's authentication layer use it, and clients import the latter.
"""

from __future__ import annotations

from edge_agent.errors import InvalidInputError

__all__ = ["Undecodable"]


class Undecodable:
    """What the server's deserializer returns for bytes that are not a valid request message
    (so the call gets INVALID_ARGUMENT with the reason, and no traceback is logged)."""

    model_name = model_version = id = ""

    def __init__(self, message_type: str, reason: str) -> None:
        self.message_type = message_type
        self.reason = reason

    def error(self) -> InvalidInputError:
        """The error the caller gets."""
        return InvalidInputError(f"the request is not a valid {self.message_type} message "
                                 f"({self.reason[:200]})")
