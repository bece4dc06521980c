"""A file picker that shows only folders and ``.edgepkg`` bundles."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual.widgets import DirectoryTree

BUNDLE_SUFFIX = ".edgepkg"


class BundleTree(DirectoryTree):
    """A directory tree filtered to bundles (hidden files left out)."""

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        return [p for p in paths if not p.name.startswith(".")
                and (p.is_dir() or p.name.endswith(BUNDLE_SUFFIX))]
