"""Durable agent state: model versions, active versions, deployment history, management token."""

from edge_agent.state.records import (
    Deployment,
    DeploymentKind,
    DeploymentStatus,
    Step,
    StepRecord,
    TuningRecord,
    VersionRecord,
    VersionState,
)
from edge_agent.state.store import DB_NAME, StateStore
from edge_agent.state.token import (
    TOKEN_FILE,
    TokenFile,
    load_or_create_token,
    rotate_token,
    tokens_equal,
)

__all__ = [
    "DB_NAME",
    "TOKEN_FILE",
    "Deployment",
    "DeploymentKind",
    "DeploymentStatus",
    "StateStore",
    "Step",
    "StepRecord",
    "TokenFile",
    "TuningRecord",
    "VersionRecord",
    "VersionState",
    "load_or_create_token",
    "rotate_token",
    "tokens_equal",
]
