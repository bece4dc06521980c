"""The one record both front ends are given: what they serve from and share.

The agent builds one :class:`FrontendContext` and hands the same object to the gRPC servicer
and the HTTP routes, so neither front end reads the other's fields: system shared memory
regions registered over one protocol are usable over the other, and repository control is
on for both or for neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from edge_agent.core.api import DataPlaneAPI, ServerMetadata
from edge_agent.frontends.common.control import RepositoryControl
from edge_agent.frontends.common.extensions import extensions
from edge_agent.frontends.common.shared_memory import SharedMemoryRegistry
from edge_agent.frontends.common.typed_budget import TypedBudget
from edge_agent.log_settings import LogSettings
from edge_agent.tracing import Tracing


@dataclass(frozen=True)
class FrontendContext:
    """What every front end serves from: the data plane, repository control (None: the
    load/unload calls are refused, naming the setting), the system shared memory regions,
    the log settings (the logging extension; changed only with ``log_control``), the one
    budget for typed inputs in flight (``[agent] max_typed_input_mib``) and the trace settings
    (Triton's trace extension)."""

    dataplane: DataPlaneAPI
    control: RepositoryControl | None = None
    shared_memory: SharedMemoryRegistry = field(default_factory=SharedMemoryRegistry)
    log_settings: LogSettings = field(default_factory=LogSettings)
    log_control: bool = False  # [grpc] log_control: the logging extension may change settings
    typed_budget: TypedBudget = field(default_factory=TypedBudget)
    tracing: Tracing = field(default_factory=Tracing)

    def extensions(self, *, binary_tensor_data: bool = False,
                   shared_memory: bool = True) -> tuple[str, ...]:
        """The protocol extensions a front end lists in its server metadata (the same for
        both, plus binary tensor data on HTTP; system shared memory where it is served to the
        caller: ``shared_memory`` False over TCP unless configured)."""
        return extensions(self.control is not None,
                          shared_memory and self.shared_memory.available, binary_tensor_data)

    def server_metadata(self, *, binary_tensor_data: bool = False,
                        shared_memory: bool = True) -> ServerMetadata:
        """The data plane's server metadata with this front end's extensions."""
        return replace(self.dataplane.server_metadata(),
                       extensions=self.extensions(binary_tensor_data=binary_tensor_data,
                                                  shared_memory=shared_memory))
