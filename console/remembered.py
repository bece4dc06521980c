"""What the console remembers between sessions, in its config directory: the folder bundles
were last picked from (a plain one-line file; unreadable or missing: nothing remembered)."""

from __future__ import annotations

from pathlib import Path

LAST_BUNDLE_DIR = "last_bundle_dir"


def last_bundle_dir(state_dir: Path | None) -> Path | None:
    """The folder a bundle was last picked from, if remembered and still there."""
    if state_dir is None:
        return None
    try:
        folder = Path((state_dir / LAST_BUNDLE_DIR).read_text().strip())
    except (OSError, ValueError):
        return None
    return folder if folder.is_dir() else None


def remember_bundle_dir(state_dir: Path | None, folder: Path) -> None:
    """Remember ``folder`` for the next deploy view (best effort: a read-only home is fine)."""
    if state_dir is None:
        return
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / LAST_BUNDLE_DIR).write_text(f"{folder.resolve()}\n")
    except OSError:
        pass
