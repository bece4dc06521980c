"""The console's error hierarchy: every failure is one line a user can act on."""

from __future__ import annotations


class ConsoleError(Exception):
    """Base of every error edge-console reports (exit code 1)."""


class UsageError(ConsoleError):
    """The command line or the console config file is wrong."""


class TokenError(ConsoleError):
    """No token for an agent, or the token file cannot be read."""


class DeployFailedError(ConsoleError):
    """A deployment or rollback did not commit on some agent (``reports``: what happened)."""

    def __init__(self, message: str, reports: list | None = None) -> None:
        super().__init__(message)
        self.reports = reports or []


# -- raised by the terminal UI (console/app.py, console/connections.py, console/rollout.py) --

class AgentUnreachableError(ConsoleError):
    """The agent did not answer (down, wrong address, firewall, timeout)."""


class AgentAuthError(ConsoleError):
    """The agent refused the management token (missing or wrong)."""


class ApiVersionMismatchError(ConsoleError):
    """The agent speaks a management API version this console does not."""


class AgentRequestError(ConsoleError):
    """The agent answered but refused or failed the request (the message says why)."""


class BundleRejectedError(ConsoleError):
    """A bundle cannot go to an agent (unreadable, or built for another profile/arch)."""


class RolloutAbortedError(ConsoleError):
    """A staged rollout stopped (the canary failed or did not stay healthy)."""
