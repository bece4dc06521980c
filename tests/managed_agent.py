"""The agent's core on a thread of the test: a real data plane and model manager over a real
SQLite state directory, deploying real signed bundles through the whole pipeline (verify,
load, warm up, health probe, device parity step, switch)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from edge_agent.core.dataplane import DataPlane
from edge_agent.manager.manager import ManagerSettings, ModelManager
from edge_agent.state import StateStore


@dataclass
class ManagedAgent:
    """A running data plane and manager; deploy with ``manager.deploy(bundle)``."""

    manager: ModelManager
    dataplane: DataPlane
    store: StateStore


@contextmanager
def managed_agent(state: Path, public_key: Path) -> Iterator[ManagedAgent]:
    """Start a data plane and manager trusting ``public_key``; everything is closed after."""
    dataplane = DataPlane(state, autoload=False)
    store = StateStore.open(state)
    manager = ModelManager(dataplane, store, ManagerSettings(
        trusted_keys=(public_key,), watch_window_s=0.0))
    manager.start()
    try:
        yield ManagedAgent(manager, dataplane, store)
    finally:
        manager.close()
        dataplane.close()
        store.close()
