"""A yes/no modal shown before anything destructive (deploy, rollback, remove)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label

from console.screens.base import ConsoleModal


class ConfirmScreen(ConsoleModal[bool]):
    """Asks ``question``; dismisses with True only on an explicit yes (``y`` or the button)."""

    BINDINGS = [("y", "answer(True)", "Yes"), ("n", "answer(False)", "No"),
                ("escape", "answer(False)", "Cancel")]

    def __init__(self, title: str, question: str, *, yes: str = "Yes") -> None:
        super().__init__()
        self.title_text, self.question, self.yes = title, question, yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Label(self.question, id="confirm-question", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.yes} (y)", id="yes", variant="error")
                yield Button("Cancel (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
