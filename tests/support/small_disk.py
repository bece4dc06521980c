"""A small tmpfs for disk-full tests: mounted for the test, unmounted after; the test is
skipped, with the reason, where mounting is not allowed (needs root or CAP_SYS_ADMIN)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mount: Path, size_bytes: int) -> Iterator[Path]:
    """``mount`` (created) as a ``size_bytes`` tmpfs of mode 0700; pytest.skip without rights."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0700",
                           "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root/CAP_SYS_ADMIN): "
                    f"{done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
