"""Errors of the model manager (part of the agent's one hierarchy, :mod:`edge_agent.errors`)."""

from __future__ import annotations

from edge_agent.errors import AgentError, ErrorCode


class ManagerError(AgentError):
    """Base of the deploy/rollback pipeline's errors."""

    code = ErrorCode.FAILED_PRECONDITION


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
