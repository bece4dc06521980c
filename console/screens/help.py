"""The help screen (``?``): every key of the current screen and of the app, by screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, Static

from console.screens.base import ConsoleModal

_KEY_NAMES = {"slash": "/", "question_mark": "?", "colon": ":", "escape": "Esc",
              "enter": "Enter", "ctrl+r": "Ctrl+R", "ctrl+p": "Ctrl+P", "space": "Space",
              "ctrl+f": "Ctrl+F", "ctrl+b": "Ctrl+B"}

INTRO = ("edge-console lists the agents found by mDNS (and those given with --agent or in the "
         "config file). Keys follow k9s/lazydocker: / filter (regex words, !word excludes), "
         "? help, : jump to a view, e events, R rollouts, d details, q quit, j/k/g/G and "
         "Ctrl+F/Ctrl+B to move. "
         "Every action is also in the command palette (Ctrl+P). Actions that change an agent "
         "ask for confirmation and are hidden under --read-only.")


def key_label(key: str) -> str:
    """How a binding's key is written on screen."""
    return ", ".join(_KEY_NAMES.get(k.strip(), k.strip()) for k in key.split(","))


def _bindings_of(node: object) -> list[Binding]:
    out: list[Binding] = []
    for b in getattr(node, "BINDINGS", []):
        out.append(b if isinstance(b, Binding) else Binding(*b))
    return out


class HelpScreen(ConsoleModal[None]):
    """Lists the keys of ``for_screen`` and the app's global keys."""

    BINDINGS = [("escape,question_mark,q", "dismiss_modal", "Close")]

    def __init__(self, for_screen: Screen[object]) -> None:
        super().__init__()
        self.for_screen = for_screen

    def _rows(self, bindings: list[Binding]) -> str:
        lines = []
        for b in bindings:
            action = b.action.split("(")[0]
            if self.for_screen.check_action(action, ()) is False:
                continue  # hidden under --read-only
            lines.append(f"  [b]{key_label(b.key):<10}[/b] {b.description or action}")
        return "\n".join(lines)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box", classes="dialog"):
            yield Label("Help", classes="dialog-title")
            yield Static(INTRO, id="help-intro")
            title = type(self.for_screen).__name__.removesuffix("Screen") or "Screen"
            yield Static(f"[b]{title}[/b]\n" + self._rows(_bindings_of(self.for_screen)))
            yield Static("[b]Everywhere[/b]\n" + self._rows(_bindings_of(self.app)))
            if self.console.read_only:
                yield Static("[b]Read-only mode:[/b] deploy, rollback and remove are hidden.")
