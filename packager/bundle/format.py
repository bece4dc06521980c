"""Constants and path rules of the .edgepkg container (see docs/bundle-format.md)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from packager.bundle.errors import BundleError

BUNDLE_SUFFIX = ".edgepkg"
CODE_DIR = "code"
"""Where a Python model's code files live inside a bundle."""
MAX_MANIFEST_BYTES = 16 << 20  # 16 MiB
MAX_MEMBER_BYTES = 4 << 30  # 4 GiB per file
MAX_TOTAL_BYTES = 16 << 30  # 16 GiB per bundle
MAX_MEMBERS = 10_000
MAX_PATH_LENGTH = 255

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=-]*$")


def bundle_filename(name: str, version: int, profile: str) -> str:
    """``NAME-VERSION-PROFILE.edgepkg``."""
    return f"{name}-{version}-{profile}{BUNDLE_SUFFIX}"


def check_model_name(name: str) -> str:
    """A model name is 1-128 of [A-Za-z0-9_.-], starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
        raise BundleError(f"model name {name!r} is invalid: use 1-128 letters, digits, '_', '.' "
                          "or '-', starting with a letter or digit")
    return name


def check_member_path(path: str) -> str:
    """Refuse anything but a plain relative POSIX path inside the bundle root.

    Rejected: empty, absolute, backslashes, drive letters, NUL, '.', '..' or empty segments,
    segments starting with '.' or '-', characters outside [A-Za-z0-9_.+=-], over-long paths.
    """
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_LENGTH:
        raise BundleError(f"member path {path!r} is empty or longer than {MAX_PATH_LENGTH}")
    if path.startswith("/") or "\\" in path or "\x00" in path or ":" in path:
        raise BundleError(f"member path {path!r} is absolute or not a plain POSIX path")
    for seg in path.split("/"):
        if seg in ("", ".", "..") or not _SEGMENT_RE.match(seg):
            raise BundleError(f"member path {path!r} has an unsafe segment {seg!r} "
                              "(no '..', '.', empty or hidden segments)")
    return path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
