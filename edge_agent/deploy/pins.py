"""Member versions pinned by served pipelines (``version = N`` in a step): they must stay
loaded and on disk while such a pipeline is served, whatever deploys, retention, KServe
unloads or removals would otherwise do to them."""

from __future__ import annotations

from edge_agent.backends.pipeline_backend import pinned_by
from edge_agent.core.deploy_port import DeployPort


def pipelines_pinning(plane: DeployPort, model: str, version: int) -> list[str]:
    """The served pipelines ("name version N") with a step pinned to ``model`` ``version``
    (a model's own versions never count)."""
    manifests = [slot.loaded.manifest for slot in plane.versions()
                 if slot.loaded is not None and slot.name != model]
    return pinned_by(manifests, model, version)


def pinned_message(model: str, version: int, users: list[str]) -> str:
    """The one-line refusal naming the pipelines that pin ``model`` ``version``."""
    return (f"{model} version {version} is a step pinned by the pipeline {', '.join(users)}; "
            "remove or redeploy that pipeline first")
