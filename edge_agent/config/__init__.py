"""The agent's configuration: one :class:`AgentConfig` tree read from ``agent.toml`` with the
``serve`` flags on top (:func:`load_config`).

A leaf package: it imports nothing of the agent's machinery (no gRPC, zeroconf, SQLite or
runtime), so that a client reading or writing an ``agent.toml`` stays light. Sections:
:mod:`.grpc`, :mod:`.http`, :mod:`.models` ([models.*], [agent], [response_cache]),
:mod:`.management` ([management], [mdns], [metrics], [registry] into the management, deploy
(:mod:`.deploy`), discovery, metrics and registry sections); every one parsed by the
table-driven validator of :mod:`.fields`.
"""

from edge_agent.config.deploy import ManagerSettings
from edge_agent.config.grpc import DEFAULT_GRPC_ADDRESS, GrpcConfig
from edge_agent.config.http import HttpConfig
from edge_agent.config.load import AgentConfig, load_config, read_toml, with_management
from edge_agent.config.management import (
    DiscoveryConfig,
    ManagementConfig,
    ManagementSections,
    MetricsConfig,
    RegistrySettings,
    TlsFiles,
    management_sections,
)
from edge_agent.config.models import ModelOverrides, ModelsConfig, model_overrides

__all__ = ["DEFAULT_GRPC_ADDRESS", "AgentConfig", "DiscoveryConfig", "GrpcConfig",
           "HttpConfig", "ManagementConfig", "ManagementSections", "ManagerSettings",
           "MetricsConfig", "ModelOverrides", "ModelsConfig", "RegistrySettings", "TlsFiles",
           "load_config", "management_sections", "model_overrides", "read_toml",
           "with_management"]
