"""Inference metrics: a hot-path recorder, a SQLite history with rollups, and queries."""

from edge_agent.metrics.recorder import LiveSample, MetricsRecorder
from edge_agent.metrics.store import (
    DB_NAME,
    MaintenanceReport,
    MetricsStore,
    SecondRow,
    StoredMetricPoint,
    StoredSystemPoint,
)
from edge_agent.metrics.summary import render_summary
from edge_agent.metrics.system import SystemSample, SystemSampler

__all__ = [
    "DB_NAME",
    "LiveSample",
    "MaintenanceReport",
    "MetricsRecorder",
    "MetricsStore",
    "SecondRow",
    "StoredMetricPoint",
    "StoredSystemPoint",
    "SystemSample",
    "SystemSampler",
    "render_summary",
]
