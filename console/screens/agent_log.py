"""The agent log screen (``l`` on an agent): the agent's own recent log lines, then new ones as
they come (the management API's StreamLogs, followed), filterable by level."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Header, RichLog
from textual.worker import get_current_worker

from console.errors import ConsoleError
from console.screens.base import ConsoleScreen
from console.widgets.console_footer import ConsoleFooter
from edge_agent.client.agent_client import ManagementError
from edge_agent.client.types import LogLine

LEVEL_STYLES = {"DEBUG": "dim", "WARNING": "yellow", "ERROR": "bold red", "CRITICAL": "bold red"}
LEVELS = ("", "warning", "error")  # what `v` cycles through ("": every line the agent keeps)
RETRY_S = 2.0
MAX_LINES = 5000


@dataclass
class LogLinesArrived(Message):
    """Lines read from the agent (``error``: why the stream stopped)."""

    lines: list[LogLine]
    error: str = ""


class AgentLogScreen(ConsoleScreen):
    """One agent's log, by fleet key."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", tooltip="Back to the agent"),
        Binding("v", "next_level", "Level", tooltip="Show every line, warnings up, errors only"),
        Binding("c", "clear", "Clear", tooltip="Clear the screen (the agent keeps its lines)"),
    ]

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.level = ""
        self.shown = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield RichLog(id="agent-log", max_lines=MAX_LINES, wrap=True, markup=False)
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self._title()
        if self.console.poll_enabled:
            self.follow()

    def _title(self) -> None:
        agent = self.console.fleet.get(self.key)
        name = agent.name if agent is not None else self.key
        self.sub_title = f"log of {name}" + (f" · {self.level} and up" if self.level else "")

    @work(thread=True, exclusive=True, group="agent-log", exit_on_error=False)
    def follow(self) -> None:
        """Tail then follow StreamLogs; reconnect after an error."""
        worker = get_current_worker()
        level = self.level
        while not worker.is_cancelled:
            agent = self.console.fleet.get(self.key)
            try:
                if agent is None:
                    raise ConsoleError("the agent is no longer listed")
                stream = self.console.connections.call(
                    agent, lambda c: c.logs(tail=500, min_level=level, follow=True))
                for line in stream:
                    if worker.is_cancelled:
                        stream.close()
                        return
                    self.post_message(LogLinesArrived([line]))
            except (ConsoleError, ManagementError) as exc:
                self.post_message(LogLinesArrived([], str(exc)))
            for _ in range(int(RETRY_S * 10)):
                if worker.is_cancelled:
                    return
                time.sleep(0.1)

    def on_log_lines_arrived(self, message: LogLinesArrived) -> None:
        log = self.query_one(RichLog)
        if message.error:
            log.write(Text(f"-- log stream stopped: {message.error}; retrying", style="red"))
            return
        for line in message.lines:
            if line.seq <= self.shown:
                continue  # a reconnect sends the tail again
            self.shown = line.seq
            stamp = time.strftime("%H:%M:%S", time.gmtime(line.ts))
            text = Text(f"{stamp} ")
            text.append(f"{line.level:<8} ", style=LEVEL_STYLES.get(line.level, ""))
            text.append(f"{line.logger}: ", style="dim")
            text.append(line.message, style=LEVEL_STYLES.get(line.level, ""))
            log.write(text)

    def action_next_level(self) -> None:
        self.level = LEVELS[(LEVELS.index(self.level) + 1) % len(LEVELS)]
        self._title()
        self.query_one(RichLog).clear()
        self.shown = 0
        if self.console.poll_enabled:
            self.follow()  # exclusive: the old stream's worker is cancelled

    def action_clear(self) -> None:
        self.query_one(RichLog).clear()
