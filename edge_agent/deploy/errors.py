"""Errors of the model manager (part of the agent's one hierarchy, :mod:`edge_agent.errors`)."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator

from edge_agent.errors import AgentError, ErrorCode


class ManagerError(AgentError):
    """Base of the deploy/rollback pipeline's errors."""

    code = ErrorCode.FAILED_PRECONDITION
    refusal: str = ""  # set by the deploy rules (edge_agent.deploy.compat.Refusal)


class InvalidBundleError(ManagerError):
    """The uploaded file is not a valid bundle, or its hashes or signature do not check out."""

    code = ErrorCode.INVALID_ARGUMENT


class IncompatibleBundleError(ManagerError):
    """The bundle was built for another arch, or for a runtime this device does not have."""

    code = ErrorCode.FAILED_PRECONDITION


class DeploymentBusyError(ManagerError):
    """Another deployment of the same model is in progress."""

    code = ErrorCode.FAILED_PRECONDITION


class VersionInUseError(ManagerError):
    """The version is active (or otherwise needed) and cannot be removed or replaced."""

    code = ErrorCode.FAILED_PRECONDITION


class DeployStepFailedError(ManagerError):
    """A step of a deployment failed; the previous version keeps serving."""

    code = ErrorCode.FAILED_PRECONDITION


class BundleTooLargeError(ManagerError):
    """The bundle is larger than an agent accepts."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class OverMemoryBudgetError(ManagerError):
    """The version does not fit in ``[agent] memory_budget_mib`` even after unloading every
    idle, unpinned model; nothing was changed."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class DiskFullError(ManagerError):
    """The state dir's file system ran out of space (or quota) while writing a version."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class StateDirReadOnlyError(ManagerError):
    """The state dir (or its file system) is read-only: nothing can be recorded or written."""

    code = ErrorCode.FAILED_PRECONDITION


_SQLITE_FULL, _SQLITE_READONLY = 13, 8


def _causes(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__


def is_disk_full(exc: BaseException) -> bool:
    """True for ENOSPC / EDQUOT and SQLite's "database or disk is full", also when wrapped
    (``__cause__``) by another error."""
    return any((isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))
               or (isinstance(e, sqlite3.Error)
                   and (getattr(e, "sqlite_errorcode", None) == _SQLITE_FULL
                        or "disk is full" in str(e)))
               for e in _causes(exc))


def is_read_only(exc: BaseException) -> bool:
    """True for EROFS / EACCES on writing and SQLite's read-only database errors."""
    return any((isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES))
               or (isinstance(e, sqlite3.Error)
                   and ((getattr(e, "sqlite_errorcode", 0) or 0) & 0xFF == _SQLITE_READONLY
                        or "readonly database" in str(e)))
               for e in _causes(exc))


def disk_full(what: str, where: object) -> DiskFullError:
    """The one message for a full disk: what could not be written, where, what to do."""
    return DiskFullError(f"the agent's disk is full: no space left to {what} in {where}; "
                         "free space on the device (or remove old versions) and deploy again")


def read_only(what: str, where: object) -> StateDirReadOnlyError:
    """The one message for a read-only state dir: what could not be written, where, what to do."""
    return StateDirReadOnlyError(
        f"the agent's state directory is read-only: cannot {what} in {where}; make it "
        "writable again (remount it read-write, check its owner and mode) and retry")


def storage_error(exc: BaseException, what: str, where: object) -> AgentError | None:
    """The clean error for a write that failed for want of space or write access (None when
    ``exc`` is neither)."""
    if is_disk_full(exc):
        return disk_full(what, where)
    if is_read_only(exc):
        return read_only(what, where)
    return None


class InvalidSettingsError(ManagerError):
    """A live settings change names an unknown key or a bad value; nothing was changed."""

    code = ErrorCode.INVALID_ARGUMENT
