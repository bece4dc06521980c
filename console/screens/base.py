"""What every console screen shares: read-only mode hides actions that change an agent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from textual.screen import ModalScreen, Screen

if TYPE_CHECKING:
    from console.app import EdgeConsoleApp

# Actions that change an agent; hidden (bindings, palette, buttons) under --read-only.
MUTATING_ACTIONS = frozenset({"deploy", "rollback", "activate", "remove", "deploy_here"})


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
