"""One deploy target: its name, a progress bar and where it is in the rollout."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar

from console.rollout.staged import Phase, TargetProgress

PHASE_STYLES = {Phase.WAITING: "dim", Phase.REFUSED: "magenta", Phase.DEPLOYING: "cyan",
                Phase.SOAKING: "yellow", Phase.DONE: "green", Phase.FAILED: "bold red",
                Phase.ROLLED_BACK: "bold red", Phase.SKIPPED: "dim"}
NO_BAR_PHASES = frozenset({Phase.REFUSED, Phase.FAILED, Phase.ROLLED_BACK, Phase.SKIPPED})


class TargetRow(Horizontal):
    """Shows one :class:`TargetProgress`."""

    def __init__(self, progress: TargetProgress, **kwargs: Any) -> None:
        super().__init__(classes="target-row", **kwargs)
        self.progress = progress

    def compose(self) -> ComposeResult:
        yield Label(self._title(), classes="target-name")
        yield ProgressBar(total=1, show_eta=False, classes="target-bar")  # no animation
        yield Label("", classes="target-state")

    def _title(self) -> str:
        return self.progress.name + (" (canary)" if self.progress.canary else "")

    def on_mount(self) -> None:
        self.show(self.progress)

    def show(self, progress: TargetProgress) -> None:
        """Render a newer state of this target."""
        self.progress = progress
        self.query_one(".target-name", Label).update(self._title())
        bar = self.query_one(ProgressBar)
        # A bar means bytes moving; a target that failed, was refused or skipped has no
        # progress to show (a full bar and "100%" next to "failed" read as success).
        bar.display = progress.phase not in NO_BAR_PHASES
        if progress.total:
            bar.update(total=progress.total, progress=min(progress.sent, progress.total))
        style = PHASE_STYLES[progress.phase]
        text = f"[{style}]{progress.phase.value}[/]"
        if progress.message:
            text += f" {escape(progress.message)}"
        self.query_one(".target-state", Label).update(text)
