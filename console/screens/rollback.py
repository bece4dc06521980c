"""The rollback modal: pick the version to go back to (the previous one by default), confirm."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label, Select

from console.agent_view import AgentSnapshot
from console.screens.base import ConsoleModal


class RollbackScreen(ConsoleModal[int | None]):
    """Dismisses with the chosen version, or None when cancelled."""

    BINDINGS = [("y", "confirm", "Roll back"), ("escape,n", "dismiss_modal", "Cancel")]

    def __init__(self, agent_name: str, model: str, snapshot: AgentSnapshot) -> None:
        super().__init__()
        self.agent_name, self.model = agent_name, model
        self.active = snapshot.active_version(model)
        self.default = snapshot.rollback_target(model)
        self.choices = sorted((v.version for v in snapshot.versions
                               if v.model == model and not v.active), reverse=True)

    def compose(self) -> ComposeResult:
        with Vertical(id="rollback-box", classes="dialog"):
            yield Label(f"Roll back {self.model} on {self.agent_name}", classes="dialog-title")
            if not self.choices:
                yield Label(f"No other version of {self.model} is on the agent's disk; "
                            "deploy one first.", id="rollback-none")
                with Horizontal(classes="dialog-buttons"):
                    yield Button("Close", id="cancel", variant="primary")
                return
            yield Label(f"Active now: version {self.active or '-'}. Switch to:")
            yield Select([(f"version {v}" + (" (previous)" if v == self.default else ""), v)
                          for v in self.choices], value=self.default or self.choices[0],
                         allow_blank=False, id="rollback-version")
            yield Label("The agent loads it, probes it, switches atomically and keeps the "
                        "current version on disk.", classes="dialog-note")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Roll back (y)", id="confirm", variant="error")
                yield Button("Cancel (n)", id="cancel", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm":
            self.action_confirm()
        else:
            self.dismiss(None)

    def action_confirm(self) -> None:
        if not self.choices:
            self.dismiss(None)
            return
        value = self.query_one("#rollback-version", Select).value
        self.dismiss(value if isinstance(value, int) else None)
