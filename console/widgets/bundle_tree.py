"""A file picker that shows only folders and ``.edgepkg`` bundles."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual.binding import Binding
from textual.widgets import DirectoryTree

BUNDLE_SUFFIX = ".edgepkg"


class BundleTree(DirectoryTree):
    """A directory tree filtered to bundles (hidden files left out); Backspace opens the
    folder above."""

    BINDINGS = [Binding("backspace", "parent", "Up a folder", show=False,
                        tooltip="Show the folder above this one")]

    def action_parent(self) -> None:
        """Show the folder above the one shown (stays at the file system's root)."""
        here = Path(self.path).resolve()
        if here.parent != here:
            self.path = here.parent

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        return [p for p in paths if not p.name.startswith(".")
                and (p.is_dir() or p.name.endswith(BUNDLE_SUFFIX))]
