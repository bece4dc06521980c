"""The management API token: created once in the state directory, compared in constant time.

``rotate_token`` replaces it (atomically); a running agent reads the file again when it
changes (:class:`TokenFile`), so rotation needs no restart. The token is never logged; only
its file path appears in messages.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import stat
import threading
from pathlib import Path

from edge_agent.errors import StateStoreError

log = logging.getLogger(__name__)

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


def rotate_token(state_dir: str | os.PathLike[str]) -> str:
    """Replace the token in ``state_dir`` with a new one (mode 0600, atomic) and return it.

    A running agent accepts only the new token from its next call on.
    """
    path = Path(state_dir) / TOKEN_FILE
    token = secrets.token_urlsafe(_TOKEN_BYTES)
    try:
        write_private(path, token + "\n")
    except OSError as exc:
        raise StateStoreError(
            f"cannot write a new management token to {path}: {exc.strerror or exc}") from exc
    return token


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600), atomically: a temporary
    file beside it, fsynced, renamed over it, the directory fsynced. A reader sees the old
    content or the new, never a part; a symlink at ``path`` is replaced, never written
    through. OSError as the system raised it."""
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class TokenFile:
    """The current token of a state directory, read again whenever its file changes.

    ``current()`` costs one ``stat`` when nothing changed. If the file disappears or cannot be
    read, the last token read stays in force (and a warning names the file).
    """

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / TOKEN_FILE
        self._lock = threading.Lock()
        self._token = load_or_create_token(state_dir)
        self._seen = self._signature()

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def current(self) -> str:
        """The token callers must present now."""
        seen = self._signature()
        if seen is None or seen == self._seen:
            return self._token
        with self._lock:
            try:
                token = _read(self.path)
                if token != self._token:
                    log.info("the management token was rotated (%s changed): calls with the "
                             "old token are refused from now on", self.path)
                self._token = token
            except (OSError, StateStoreError) as exc:
                log.warning(
                    "cannot read the changed management token %s (%s); the previous token "
                    "stays in force", self.path, exc)
            self._seen = seen
        return self._token


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
