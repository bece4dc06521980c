"""The fleet table: one row per agent, updated in place so the cursor never jumps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.geometry import Size
from textual.widgets import DataTable

from console.fleet import SORT_COLUMNS, AgentState, FleetAgent, format_ago
from console.messages import SortRequested
from console.plot_data import sparkline

COLUMN_TITLES = {"name": "NAME", "status": "STATUS", "rate": "REQ/S", "errors": "ERR/S",
                 "address": "ADDRESS", "arch": "ARCH",
                 "profile": "PROFILE", "models": "MODELS", "seen": "LAST SEEN"}
STATE_STYLES = {AgentState.ONLINE: "green", AgentState.UNKNOWN: "dim",
                AgentState.OFFLINE: "dim red", AgentState.UNREACHABLE: "bold red",
                AgentState.AUTH_FAILED: "bold yellow", AgentState.API_MISMATCH: "bold magenta"}
STATE_ICONS = {AgentState.ONLINE: "●", AgentState.UNKNOWN: "○", AgentState.OFFLINE: "○",
               AgentState.UNREACHABLE: "✖", AgentState.AUTH_FAILED: "⚿",
               AgentState.API_MISMATCH: "≠"}

Cells = tuple[str | Text, ...]
SPARK_WIDTH = 10


def traffic_cell(values: tuple[float, ...], *, errors: bool = False) -> str | Text:
    """A sparkline of the last minutes and the newest value (``-`` when unknown)."""
    if not values:
        return "-"
    text = f"{sparkline(values, SPARK_WIDTH)} {values[-1]:.1f}"
    return Text(text, style="bold red") if errors and any(values) else text


def row_cells(agent: FleetAgent, now: float) -> Cells:
    """The cells of one agent's row (``now`` only feeds the LAST SEEN column)."""
    style = STATE_STYLES[agent.state]
    models = ", ".join(agent.models) if agent.models else "-"
    seen = format_ago(None if agent.last_seen is None else max(0.0, now - agent.last_seen))
    if agent.state is AgentState.OFFLINE:  # a row for the record, not a live agent: dimmed
        return (Text(agent.name, style="dim bold"),
                Text(f"{STATE_ICONS[agent.state]} {agent.state.value}", style=style),
                *(Text(c if isinstance(c, str) else c.plain, style="dim") for c in (
                    traffic_cell(agent.rates), traffic_cell(agent.errors),
                    agent.address, agent.arch or "-", agent.profile or "-",
                    models if len(models) <= 40 else models[:39] + "…", seen)))
    return (Text(agent.name, style="bold"),
            Text(f"{STATE_ICONS[agent.state]} {agent.state.value}", style=style),
            traffic_cell(agent.rates), traffic_cell(agent.errors, errors=True), agent.address,
            agent.arch or "-", agent.profile or "-",
            models if len(models) <= 40 else models[:39] + "…", seen)


class FleetTable(DataTable[str | Text]):
    """Shows :class:`FleetAgent` rows; :meth:`show` diffs against what is on screen."""

    def __init__(self, **kwargs: Any) -> None:
        # NAME stays put when the table scrolls right (80x24 shows half the columns)
        super().__init__(cursor_type="row", zebra_stripes=True, fixed_columns=1, **kwargs)
        self._shown: dict[str, Cells] = {}
        self._order: list[str] = []

    def on_mount(self) -> None:
        for column in SORT_COLUMNS:
            self.add_column(COLUMN_TITLES[column], key=column)

    @property
    def selected_key(self) -> str | None:
        """The key of the agent under the cursor, if any."""
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def set_sort_marker(self, column: str, reverse: bool) -> None:
        """Show which column sorts the table (an arrow in its header)."""
        for key, col in self.columns.items():
            title = COLUMN_TITLES[str(key.value)]
            col.label = Text(title + ((" ▼" if reverse else " ▲") if key.value == column else ""))
        self.refresh()

    def show(self, agents: Sequence[FleetAgent], now: float) -> None:
        """Make the table show ``agents`` in this order, touching only what changed."""
        order = [a.key for a in agents]
        cells = {a.key: row_cells(a, now) for a in agents}
        if order == self._order and cells == self._shown:
            return
        if order != self._order:
            selected = self.selected_key
            self.clear()
            for key in order:
                self.add_row(*cells[key], key=key)
            self._order = order
            if selected in cells:
                self.move_cursor(row=order.index(selected), animate=False)
        else:
            for key in order:
                old = self._shown.get(key)
                for column, (before, after) in enumerate(zip(old or (), cells[key], strict=True)):
                    if before != after:
                        self.update_cell(key, SORT_COLUMNS[column], after, update_width=True)
        self._shown = cells
        self._fit_columns(list(cells.values()))

    def _fit_columns(self, rows: list[Cells]) -> None:
        """Size every column to its widest cell now (not on the next idle), so what is drawn
        never depends on when the table last went idle."""
        for index, (key, column) in enumerate(self.columns.items()):
            title = COLUMN_TITLES[str(key.value)] + " ▲"
            cells = [c[index] for c in rows]
            widths = [len(title)] + [Text(x).cell_len if isinstance(x, str) else x.cell_len
                                     for x in cells]
            column.auto_width = False
            column.width = max(widths)
        # the scrollable width follows now: scrolling right reaches the last column
        self.virtual_size = Size(sum(c.get_render_width(self) for c in self.columns.values()),
                                 self.virtual_size.height)
        self.refresh()

    def _column_starts(self) -> list[int]:
        """Where each scrollable column starts (x, past the fixed NAME column)."""
        starts, x = [], 0
        for column in list(self.columns.values())[self.fixed_columns:]:
            starts.append(x)
            x += column.get_render_width(self)
        return starts

    def action_cursor_right(self) -> None:
        """Scroll right by one whole column (a row cursor has no column to move)."""
        later = [x for x in self._column_starts() if x > self.scroll_x]
        self.scroll_to(x=min(later[0], self.max_scroll_x) if later else self.max_scroll_x,
                       animate=False)

    def action_cursor_left(self) -> None:
        """Scroll left by one whole column."""
        earlier = [x for x in self._column_starts() if x < self.scroll_x]
        self.scroll_to(x=earlier[-1] if earlier else 0, animate=False)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.post_message(SortRequested(str(event.column_key.value)))
