"""The deploy pipeline's parity step, on a real data plane, real SQLite state, real bundles."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.deploy.manager import ManagerSettings, ModelManager
from edge_agent.state import DeploymentStatus, StateStore, Step, VersionState
from tests.parity.bundles import ParityBundles

X = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)


@dataclass
class Managed:
    manager: ModelManager
    dataplane: DataPlane
    store: StateStore

    def served_version(self) -> int:
        return self.dataplane.infer(InferRequest("mlp", {"input": X})).version


@pytest.fixture
def managed(tmp_path: Path, parity_bundles: ParityBundles) -> Iterator[Managed]:
    state = tmp_path / "state"
    dataplane = DataPlane(state, autoload=False)
    store = StateStore.open(state)
    manager = ModelManager(dataplane, store, ManagerSettings(
        trusted_keys=(parity_bundles.public_key,), watch_window_s=0.0))
    manager.start()
    try:
        yield Managed(manager, dataplane, store)
    finally:
        manager.close()
        dataplane.close()
        store.close()


def test_an_honest_version_passes_the_parity_step_with_its_figures(
        managed: Managed, parity_bundles: ParityBundles) -> None:
    events = []
    done = managed.manager.deploy(parity_bundles.good[1], on_event=events.append)
    assert done.ok, done.message
    steps = {s.step: s for s in done.deployment.steps}
    assert [s.step for s in done.deployment.steps].index(Step.PARITY) == \
        [s.step for s in done.deployment.steps].index(Step.PROBED) + 1
    parity = steps[Step.PARITY]
    assert parity.ok
    assert "agrees with the source model" in parity.message
    assert "max abs error" in parity.message and "batch sizes [1, 4]" in parity.message
    assert "parity" in [e.step for e in events]
    assert managed.served_version() == 1


def test_a_resigned_bundle_with_wrong_numbers_is_refused_and_the_previous_version_serves(
        managed: Managed, parity_bundles: ParityBundles) -> None:
    assert managed.manager.deploy(parity_bundles.good[1]).ok
    refused = managed.manager.deploy(parity_bundles.tampered)
    assert not refused.ok
    assert refused.deployment.status == DeploymentStatus.FAILED
    failed = [s for s in refused.deployment.steps if not s.ok]
    assert failed[0].step == Step.PARITY
    # its signature was valid: it got past verification, loading and the health probe
    reached = [s.step for s in refused.deployment.steps if s.ok]
    assert Step.VERIFIED in reached and Step.PROBED in reached
    assert "signed by key" in refused.deployment.steps[1].message
    assert "disagrees with the source model" in refused.message
    assert "max abs error" in refused.message and "top-1 agreement" in refused.message
    assert refused.active_version == 1
    assert managed.served_version() == 1
    assert managed.store.active_version("mlp") == 1
    record = managed.store.version("mlp", 3)
    assert record is not None and record.state == VersionState.FAILED
    assert record.load_error is not None and "max abs error" in record.load_error
    history = managed.store.history("mlp", limit=1)[0]
    assert "parity failed" in history.reason and "disagrees" in history.reason
    # and a later honest version still deploys
    assert managed.manager.deploy(parity_bundles.good[2]).ok
    assert managed.served_version() == 2


def test_a_bundle_without_reference_data_still_deploys_and_says_so(
        managed: Managed, parity_bundles: ParityBundles) -> None:
    done = managed.manager.deploy(parity_bundles.old_format)
    assert done.ok, done.message
    parity = next(s for s in done.deployment.steps if s.step == Step.PARITY)
    assert parity.ok and "no reference data" in parity.message
    assert managed.served_version() == 4


def test_rollback_and_reload_run_the_check_too(managed: Managed,
                                               parity_bundles: ParityBundles) -> None:
    assert managed.manager.deploy(parity_bundles.good[1]).ok
    assert managed.manager.deploy(parity_bundles.good[2]).ok
    back = managed.manager.rollback("mlp")
    assert back.ok, back.message
    assert any(s.step == Step.PARITY and "agrees" in s.message for s in back.deployment.steps)
    assert managed.served_version() == 1


def test_a_reload_of_the_active_version_runs_the_check_on_the_fresh_copy(
        managed: Managed, parity_bundles: ParityBundles) -> None:
    assert managed.manager.deploy(parity_bundles.good[1]).ok
    again = managed.manager.activate("mlp", 1, force=True)
    assert again.ok, again.message
    steps = [s.step for s in again.deployment.steps]
    assert steps.index(Step.PARITY) == steps.index(Step.PROBED) + 1 < steps.index(Step.SWITCHED)
    assert managed.served_version() == 1
