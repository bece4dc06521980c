"""One writer per state directory: an exclusive ``flock`` on ``STATE_DIR/agent.lock``.

``edge-agent serve`` holds the lock for its whole life and takes it before any recovery or
write; ``edge-agent add-bundle`` holds it while it installs. The kernel releases it when the
holder exits, even on ``kill -9``, so a stale lock file never blocks anyone. The holder writes
``PID ROLE`` into the file, which the refusal message quotes. Read-only commands (``metrics``,
``token``) never take it.

Usage::

    lock = claim_state_dir(Path("/var/lib/edge-agent"), role="serve")   # creates it (0700)
    ...
    lock.release()
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import stat
from pathlib import Path

from edge_agent.errors import StateStoreError

log = logging.getLogger(__name__)
LOCK_FILE = "agent.lock"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class StateDirInUseError(StateStoreError):
    """Another process (an agent, or add-bundle) holds the state directory's lock."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


class StateDirNotWritableError(StateStoreError):
    """The state directory exists but this process cannot create files in it."""


def not_writable(directory: Path, exc: OSError | None = None) -> StateDirNotWritableError:
    """The one-line error for a state directory this process cannot write."""
    cause = f" ({exc.strerror})" if exc is not None and exc.strerror else ""
    return StateDirNotWritableError(
        f"state directory {directory} is not writable{cause}; run the agent as a user that "
        "owns it (chown it, or on a read-only file system pick another --state-dir)")


class StateLock:
    """The held lock of one state directory; :meth:`release` (or process exit) frees it."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        """True until :meth:`release`."""
        return self._fd is not None

    def release(self) -> None:
        """Clear the PID from the file and unlock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> StateLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each mode 0700 whatever the umask."""
    missing: list[Path] = []
    p = directory
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, PRIVATE_DIR_MODE)


def tighten_dir(directory: Path) -> None:
    """Take the group's and others' bits off an existing ``directory`` (a pre-created 0755
    state dir becomes 0700; the owner's bits are kept, so a 0555 one stays unwritable), logged
    at INFO (a warning only when that fails). A directory this process may not chmod (another
    owner, a read-only file system) is left as it is: the writability check that follows
    reports what matters."""
    try:
        mode = stat.S_IMODE(directory.stat().st_mode)
    except OSError:
        return
    if not mode & 0o077:
        return
    try:
        os.chmod(directory, mode & PRIVATE_DIR_MODE)
        log.info("state directory %s was mode %04o (open to other users); made it %04o",
                 directory, mode, mode & PRIVATE_DIR_MODE)
    except OSError as exc:
        if exc.errno == errno.EROFS:  # nothing can be written there: reported next
            return
        log.warning("state directory %s is open to other users (mode %04o) and could not be "
                    "made private (%s); chmod 700 it", directory, mode, exc.strerror or exc)


def claim_state_dir(state_dir: str | os.PathLike[str], role: str) -> StateLock:
    """Create ``state_dir`` if needed (0700; an existing one loses its group and other
    bits), check it is writable and lock it for ``role``.

    Raises :class:`StateDirInUseError` naming the holder's PID when another process holds it,
    :class:`StateDirNotWritableError` when it cannot be written, and StateStoreError when the
    path is not a directory.
    """
    directory = Path(state_dir)
    if directory.exists() and not directory.is_dir():
        raise StateStoreError(f"state directory {directory} is not a directory (a file is in "
                              "its place); move it aside or give another --state-dir")
    try:
        make_private_dirs(directory)
    except OSError as exc:
        if exc.errno in _NOT_WRITABLE:
            raise StateStoreError(
                f"cannot create the state directory {directory} ({exc.strerror}); create it "
                "as a user who may (e.g. sudo install -d -m 700 -o $USER DIR) or pick another "
                "--state-dir") from None
        raise StateStoreError(f"cannot create the state directory {directory}: "
                              f"{exc.strerror or exc}") from None
    tighten_dir(directory)
    path = directory / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except OSError as exc:
        if exc.errno in _NOT_WRITABLE:
            raise not_writable(directory, exc) from None
        raise StateStoreError(f"cannot open the lock file {path}: {exc.strerror or exc}") \
            from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise _in_use(directory, holder, role) from None
    except BaseException:
        os.close(fd)
        raise
    lock = StateLock(directory, fd)
    try:
        _probe_writable(directory)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {role}\n".encode(), 0)
    except OSError as exc:
        lock.release()
        if exc.errno in _NOT_WRITABLE:
            raise not_writable(directory, exc) from None
        raise StateStoreError(f"cannot write to the state directory {directory}: "
                              f"{exc.strerror or exc}") from None
    except BaseException:
        lock.release()
        raise
    return lock


def _probe_writable(directory: Path) -> None:
    probe = directory / f".write-probe-{secrets.token_hex(4)}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    os.close(fd)
    probe.unlink()


def _read_holder(fd: int) -> tuple[int, str] | None:
    try:
        text = os.pread(fd, 256, 0).decode(errors="replace").split()
    except OSError:
        return None
    if not text or not text[0].isdigit():
        return None
    return int(text[0]), " ".join(text[1:])


def _in_use(directory: Path, holder: tuple[int, str] | None, role: str) -> StateDirInUseError:
    if holder is None:
        who, pid = "another edge-agent process (its PID is not written yet)", None
    else:
        pid, what = holder
        who = f"edge-agent {what or 'process'} (PID {pid})"
    advice = ("deploy to the running agent with edge-console deploy, or stop it first"
              if role == "add-bundle" else "stop it first, or give this one another --state-dir")
    return StateDirInUseError(f"state directory {directory} is in use by {who}; {advice}", pid)
