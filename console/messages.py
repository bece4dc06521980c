"""Messages the console's workers and widgets post (dataclasses, so they print readably)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class FleetChanged(Message):
    """The fleet view model changed; a newer one replaces an unhandled older one."""

    def can_replace(self, message: Message) -> bool:  # collapse bursts (100 agents appearing)
        return isinstance(message, FleetChanged)


@dataclass
class SortRequested(Message):
    """The operator asked to sort the fleet table by ``column``."""

    column: str
