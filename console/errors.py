"""The console's one error hierarchy.

Every error carries a message a user can act on (what went wrong and what to do next); the TUI
shows it in the agent's row or a notification and the scripting subcommands print it as one
line. Shared by the TUI and the scripting subcommands: add classes, do not rename them.
"""

from __future__ import annotations

from typing import Any


class ConsoleError(Exception):
    """Base of every error the console reports to the operator."""


class ConsoleConfigError(ConsoleError):
    """The console's config file or command-line options are invalid."""


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
    """A staged rollout stopped (the canary failed or did not stay healthy); ``reports`` says
    what the canary did."""

    def __init__(self, message: str, reports: list[Any] | None = None) -> None:
        super().__init__(message)
        self.reports = reports or []


class DeploymentFailedError(ConsoleError):
    """A deploy or rollback did not commit on some agent; ``reports`` says what happened."""

    def __init__(self, message: str, reports: list[Any] | None = None) -> None:
        super().__init__(message)
        self.reports = reports or []
