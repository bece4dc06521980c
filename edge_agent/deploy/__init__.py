"""The model manager: deploy, activate, roll back and remove model versions (protocol-free).

The package holds light values the console imports too (device compatibility, errors,
outcomes); the manager itself is :class:`edge_agent.deploy.manager.ModelManager`, imported
from its module so that ``import edge_agent.deploy.device`` loads no repository or backend.
Its pipeline (:mod:`edge_agent.deploy.pipeline`) runs verify -> stage -> load and warm up ->
health probe -> atomic switch -> drain -> unload, records each step durably in the
:class:`edge_agent.state.StateStore`, and leaves the previous version serving on any failure.
"""

from edge_agent.config.deploy import ManagerSettings
from edge_agent.deploy.compat import check_fits
from edge_agent.deploy.device import DeviceInfo, detect_device
from edge_agent.deploy.errors import (
    DeploymentBusyError,
    DeployStepFailedError,
    IncompatibleBundleError,
    InvalidBundleError,
    ManagerError,
    VersionInUseError,
)
from edge_agent.deploy.outcome import DeployOutcome, StepEvent, VersionView

__all__ = [
    "DeployOutcome",
    "DeployStepFailedError",
    "DeploymentBusyError",
    "DeviceInfo",
    "IncompatibleBundleError",
    "InvalidBundleError",
    "ManagerError",
    "ManagerSettings",
    "StepEvent",
    "VersionInUseError",
    "VersionView",
    "check_fits",
    "detect_device",
]
