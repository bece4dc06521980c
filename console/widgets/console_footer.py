"""The footer of every console screen: the keys that lead everywhere (help, jump, quit) come
first, so a footer too narrow for every key never loses them."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

ESSENTIAL_ACTIONS = ("app.help", "app.jump", "app.quit", "help", "jump", "quit")


class ConsoleFooter(Footer):
    """A :class:`Footer` that puts ``?``, ``:`` and ``q`` first."""

    def compose(self) -> ComposeResult:
        widgets = list(super().compose())

        def rank(widget: object) -> int:
            action = widget.action if isinstance(widget, FooterKey) else ""
            return 0 if action in ESSENTIAL_ACTIONS else 1

        yield from sorted(widgets, key=rank)  # stable: the others keep their order
