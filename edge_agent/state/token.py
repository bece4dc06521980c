"""The management API token: created once in the state directory, compared in constant time.

The token is never logged; only its file path appears in messages.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from edge_agent.errors import StateStoreError

TOKEN_FILE = "management.token"
_TOKEN_BYTES = 32


def load_or_create_token(state_dir: str | os.PathLike[str]) -> str:
    """The management token in ``state_dir``, creating it (mode 0600) on first start.

    Creation is exclusive (``O_EXCL``), so two agents starting at once agree on one token.
    A pre-existing file readable by others is tightened to 0600.
    """
    directory = Path(state_dir)
    path = directory / TOKEN_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            return _read(path)
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        return token
    except OSError as exc:
        raise StateStoreError(
            f"cannot create or read the management token {path}: {exc.strerror or exc}") from exc


def _read(path: Path) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        path.chmod(0o600)
    token = path.read_text().strip()
    if not token:
        raise StateStoreError(
            f"the management token file {path} is empty; delete it and restart the agent "
            "to create a new token")
    return token


def tokens_equal(presented: str | bytes | None, expected: str) -> bool:
    """Constant-time comparison of a presented token with the expected one."""
    if not presented:
        return False
    given = presented if isinstance(presented, bytes) else presented.encode()
    return hmac.compare_digest(given, expected.encode())
