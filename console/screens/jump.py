"""The ``:`` prompt: jump to a view by name (``fleet``, ``events``, ``agent NAME``, ...)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label

from console.screens.base import ConsoleModal

VIEWS = ("fleet", "events", "deploy", "rollouts", "history", "help", "quit")


class JumpScreen(ConsoleModal[str | None]):
    """Asks for a view; dismisses with what was typed (stripped), or None on Escape."""

    def __init__(self, agent_names: Sequence[str] = ()) -> None:
        super().__init__()
        self.choices = [*VIEWS, *(f"agent {n}" for n in agent_names)]

    def compose(self) -> ComposeResult:
        with Vertical(id="jump-box", classes="dialog"):
            yield Label("Jump to: " + ", ".join(VIEWS) + ", agent NAME", classes="dialog-title")
            yield Input(placeholder=":", id="jump-input",
                        suggester=SuggestFromList(self.choices, case_sensitive=False))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter takes the completion shown (what Tab or Right would accept), else the text."""
        typed = event.value.strip()
        shown = next((c for c in self.choices if typed and c.lower().startswith(typed.lower())),
                     None)
        self.dismiss(shown or typed or None)
