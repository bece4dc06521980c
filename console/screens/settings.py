"""The live settings modal: a model's settings as editable ``key = value`` lines.

Lines that are not comments are the model's live settings after saving (the agent reloads the
active version with them through its hot-swap path); a deleted line goes back to agent.toml's
value. Settings that come from elsewhere are listed as comments, ready to uncomment.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label, TextArea

from console.errors import ConsoleError
from console.screens.base import ConsoleModal
from edge_agent.client.types import SettingInfo


def settings_text(settings: Sequence[SettingInfo]) -> str:
    """The editable text: live settings as lines, the others as comments with their source."""
    live = [f"{s.key} = {s.value}" for s in settings if s.source == "live"]
    other = [f"# {s.key} = {s.value or '(unset)'}    ({s.source})" for s in settings
             if s.source != "live"]
    return "\n".join(live + other) + "\n"


def parse_settings_text(text: str) -> dict[str, str]:
    """``key = value`` lines (comments and blank lines skipped) as a dict; ConsoleError naming
    the first malformed line."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConsoleError(f"line {number}: expected KEY = VALUE, got {line!r}")
        out[key.strip()] = value.strip()
    return out


class SettingsScreen(ConsoleModal[dict[str, str] | None]):
    """Dismisses with the new live settings (key -> TOML literal), or None when cancelled."""

    BINDINGS = [("ctrl+s", "confirm", "Apply"), ("escape", "dismiss_modal", "Cancel")]

    def __init__(self, agent_name: str, model: str, settings: Sequence[SettingInfo]) -> None:
        super().__init__()
        self.agent_name, self.model = agent_name, model
        self.text = settings_text(settings)

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-box", classes="dialog"):
            yield Label(f"Settings of {self.model} on {self.agent_name}",
                        classes="dialog-title")
            yield TextArea(self.text, id="settings-text", language=None)
            yield Label("", id="settings-error")
            yield Label("Lines are the live settings (TOML values); a removed line goes back "
                        "to agent.toml. Applied like a hot swap: warm-up, probe, switch.",
                        classes="dialog-note")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Apply (ctrl+s)", id="confirm", variant="warning")
                yield Button("Cancel (esc)", id="cancel", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#settings-text", TextArea).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm":
            self.action_confirm()
        else:
            self.dismiss(None)

    def action_confirm(self) -> None:
        try:
            values = parse_settings_text(self.query_one("#settings-text", TextArea).text)
        except ConsoleError as exc:
            self.query_one("#settings-error", Label).update(f"[red]{exc}[/]")
            return
        self.dismiss(values)
