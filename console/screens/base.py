"""What every console screen shares: read-only mode hides actions that change an agent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from textual import events
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer

if TYPE_CHECKING:
    from console.app import EdgeConsoleApp

# Actions that change an agent; hidden (bindings, palette, buttons) under --read-only.
MUTATING_ACTIONS = frozenset({"deploy", "rollback", "activate", "remove", "deploy_here",
                              "settings"})
# Below this terminal size a screen is "compact": console.tcss drops or shrinks side panes.
COMPACT_BELOW = (100, 30)


def console_app(screen: Screen[Any]) -> EdgeConsoleApp:
    """The running console app, typed."""
    return cast("EdgeConsoleApp", screen.app)


class ConsoleScreen(Screen[None]):
    """A full screen of the console."""

    @property
    def console(self) -> EdgeConsoleApp:
        """The running console app."""
        return console_app(self)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in MUTATING_ACTIONS and self.console.read_only)

    @property
    def compact(self) -> bool:
        """True on a small terminal (80x24): the screen shows its compact layout."""
        return self.has_class("compact")

    def on_resize(self, event: events.Resize) -> None:
        compact = event.size.width < COMPACT_BELOW[0] or event.size.height < COMPACT_BELOW[1]
        self.set_class(compact, "compact")
        for footer in self.query(Footer):  # shorter footer: no palette hint, tighter keys
            footer.compact = compact
            footer.show_command_palette = not compact
        self.on_compact_changed(compact)

    def on_compact_changed(self, compact: bool) -> None:
        """Hook for screens that render differently when compact."""


T = TypeVar("T")


class ConsoleModal(ModalScreen[T], Generic[T]):
    """A modal screen of the console (dismissed with Escape)."""

    BINDINGS = [("escape", "dismiss_modal", "Close")]

    @property
    def console(self) -> EdgeConsoleApp:
        """The running console app."""
        return console_app(self)

    def action_dismiss_modal(self) -> None:
        self.dismiss()
