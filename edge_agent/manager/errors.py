"""Errors of the model manager (part of the agent's one hierarchy, :mod:`edge_agent.errors`)."""

from __future__ import annotations

from edge_agent.errors import AgentError, ErrorCode


class ManagerError(AgentError):
    """Base of the deploy/rollback pipeline's errors."""

    code = ErrorCode.FAILED_PRECONDITION
    refusal: str = ""  # set by the deploy rules (edge_agent.manager.compat.Refusal)


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


class DeploymentFailedError(ManagerError):
    """A step of a deployment failed; the previous version keeps serving."""

    code = ErrorCode.FAILED_PRECONDITION


class BundleTooLargeError(ManagerError):
    """The bundle is larger than an agent accepts."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class DiskFullError(ManagerError):
    """The state dir's file system ran out of space (or quota) while writing a version."""

    code = ErrorCode.RESOURCE_EXHAUSTED


def is_disk_full(exc: BaseException) -> bool:
    """True for ENOSPC / EDQUOT, also when wrapped (``__cause__``) by another error."""
    import errno

    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__  # type: ignore[assignment]
    return False


def disk_full(what: str, where: object) -> DiskFullError:
    """The one message for a full disk: what could not be written, where, what to do."""
    return DiskFullError(f"the agent's disk is full: no space left to {what} in {where}; "
                         "free space on the device (or remove old versions) and deploy again")
