"""The agent screen: models and versions, live metrics, deployments and events of one agent."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Static

from console.screens.base import ConsoleScreen


class AgentScreen(ConsoleScreen):
    """One agent, by fleet key."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back", tooltip="Back to the fleet")]

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="agent-summary")
        yield Footer()

    def on_mount(self) -> None:
        agent = self.console.fleet.get(self.key)
        if agent is not None:
            self.sub_title = agent.name
            self.query_one("#agent-summary", Static).update(f"{agent.name} {agent.address}")
