"""The deploy targets: a selection list whose boxes read as tick boxes (``[x]``, ``[ ]``, and
``[-]`` for a refused target that cannot be ticked)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widgets import OptionList, SelectionList
from textual.widgets.option_list import OptionDoesNotExist

BOX_WIDTH = 4  # "[x] "


class TargetList(SelectionList[str]):
    """Agents to deploy to; Space ticks the highlighted one."""

    def _left_gutter_width(self) -> int:
        return BOX_WIDTH

    def render_line(self, y: int) -> Strip:
        # the option list's own line (a long prompt wraps onto several), then a tick box on
        # the option's first line and a blank gutter on the lines it wraps onto
        line = OptionList.render_line(self, y)
        try:
            index, offset = self._lines[self.scroll_offset.y + y]
            option = self.get_option_at_index(index)
        except (IndexError, OptionDoesNotExist):
            return line
        segments = list(line)
        base = segments[0].style if segments else None
        style = (base or Style()) + Style(meta={"option": index})  # a click on it ticks it
        if offset:
            return Strip([Segment(" " * BOX_WIDTH, style), *segments])
        if option.disabled:
            mark, mark_style = "-", style + Style(dim=True)
        elif option.value in self._selected:
            mark, mark_style = "x", style + Style(bold=True, color="green")
        else:
            mark, mark_style = " ", style
        return Strip([Segment("[", style), Segment(mark, mark_style), Segment("] ", style),
                      *segments])
