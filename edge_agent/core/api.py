"""The protocol-free data plane contract that the gRPC edge (and tests) program against.

The serving core implements :class:`DataPlaneAPI`; the KServe v2 servicer only translates
protobuf messages to these calls and maps :mod:`edge_agent.errors` to status codes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from edge_agent.core.tallies import LifecycleTotal
from edge_agent.core.types import InferRequest, InferResult, ModelMetadata, ModelStats
from edge_agent.errors import AgentError
from packager.bundle.manifest import Manifest


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    """Name, version and protocol extensions of the server."""

    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RepositoryEntry:
    """One model version in the repository and its state (READY, LOADING, UNAVAILABLE, ...)."""

    name: str
    version: int
    state: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ModelConfigInfo:
    """What ModelConfig reports: the manifest (IO, batching) and the backend actually used."""

    manifest: Manifest
    backend: str
    instances: int
    device: str = ""  # the backend's device (CPUExecutionProvider, GPU, cuda:0 (...), ...)


class DataPlaneAPI(Protocol):
    """What the protocol edge may ask of the serving core. Every method is thread-safe."""

    def live(self) -> bool: ...

    def ready(self) -> bool: ...

    def server_metadata(self) -> ServerMetadata: ...

    def model_ready(self, name: str, version: int | None = None) -> bool: ...

    def model_metadata(self, name: str, version: int | None = None) -> ModelMetadata:
        """Raises ModelNotFoundError for an unknown model or version."""
        ...

    def model_config(self, name: str, version: int | None = None) -> ModelConfigInfo: ...

    def submit(self, request: InferRequest, *, inline: bool = True) -> Future[InferResult]:
        """Validate and enqueue. Raises AgentError subclasses synchronously for bad input,
        unknown models and a full queue; failures during execution are set on the future.
        ``inline=False``: never run on the calling thread (a stream's reader keeps reading)."""
        ...

    def infer(self, request: InferRequest, timeout_s: float | None = None) -> InferResult:
        """Blocking form of submit() for thread-pool servers (added by the serving core):
        when nothing else is in flight the request runs on the calling thread with no Future
        and no thread handoff. Raises every AgentError (including execution failures)."""
        ...

    def infer_together(self, requests: Sequence[InferRequest]
                       ) -> list[InferResult | AgentError]:
        """Requests taken up together, each answered as :meth:`infer` would, in order (its
        error returned, not raised); those of one idle version run as one execution on the
        calling thread."""
        ...

    def runs_now(self, name: str, version: int | None = None) -> bool:
        """Whether a request for the model would run at once on the calling thread, in
        microseconds (a hint for a front end choosing where to run it)."""
        ...

    def stream(self, request: InferRequest) -> Iterator[InferResult]:
        """A decoupled model's responses to ``request`` (each taken as it is produced).
        Raises AgentError subclasses for bad input; failures while streaming raise from the
        iterator."""
        ...

    def statistics(
        self, name: str | None = None, version: int | None = None
    ) -> list[ModelStats]: ...

    def lifecycle(self) -> list[LifecycleTotal]:
        """Loads and unloads so far, per model and reason, with the seconds they took."""
        ...

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]: ...

    def sequence_slots(self) -> dict[str, tuple[int, int]]:
        """Stateful models that have had sequences: name -> (slots held, slots)."""
        ...

    def close(self) -> None: ...
