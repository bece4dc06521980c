"""Version and deployment state in the state store (a real SQLite file in a temporary
directory): what a commit, a failure, a removal and an interrupted start-up leave behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.errors import StateStoreError
from edge_agent.state import StateStore
from edge_agent.state.records import (
    DeploymentKind,
    DeploymentStatus,
    Step,
    VersionRecord,
    VersionState,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore.open(tmp_path / "state")
    for version in (1, 2):
        s.upsert_version(VersionRecord("cam", version, str(tmp_path / str(version)), "0" * 64, 1))
    yield s
    s.close()


def deploy(store: StateStore, version: int) -> int:
    dep = store.begin_deployment("cam", DeploymentKind.DEPLOY, to_version=version)
    for step in (Step.RECEIVED, Step.VERIFIED, Step.LOADED, Step.SWITCHED):
        store.record_step(dep, step)
    return dep


def test_a_new_version_is_staged_and_moves_through_load_states(store: StateStore) -> None:
    record = store.version("cam", 1)
    assert record is not None and record.state is VersionState.STAGED
    store.set_version_state("cam", 1, VersionState.LOADING)
    store.set_version_state("cam", 1, VersionState.READY, load_ms=12.5)
    store.set_version_state("cam", 1, VersionState.UNLOADED)
    record = store.version("cam", 1)
    assert record is not None and record.state is VersionState.UNLOADED
    assert record.load_ms == 12.5  # kept when no new figure is given


def test_a_failed_load_keeps_its_error(store: StateStore) -> None:
    store.set_version_state("cam", 2, VersionState.FAILED, load_error="no such op")
    record = store.version("cam", 2)
    assert record is not None and (record.state, record.load_error) == (VersionState.FAILED,
                                                                        "no such op")


def test_an_unknown_version_cannot_change_state(store: StateStore) -> None:
    with pytest.raises(StateStoreError, match="has no recorded version 9"):
        store.set_version_state("cam", 9, VersionState.READY)


def test_a_commit_makes_the_target_active_and_records_the_steps(store: StateStore) -> None:
    done = store.commit_deployment(deploy(store, 1))
    assert done.status is DeploymentStatus.COMMITTED and done.last_step is Step.COMMITTED
    assert [s.step for s in done.steps][-1] is Step.COMMITTED
    assert store.active_version("cam") == 1
    second = store.begin_deployment("cam", DeploymentKind.DEPLOY, to_version=2)
    assert store.deployment(second).from_version == 1  # defaults to the active version


def test_a_failure_leaves_the_active_version_alone(store: StateStore) -> None:
    store.commit_deployment(deploy(store, 1))
    failed = store.fail_deployment(deploy(store, 2), "probe failed", failed_step=Step.PROBED)
    assert failed.status is DeploymentStatus.FAILED and failed.reason == "probe failed"
    assert [(s.step, s.ok) for s in failed.steps][-2:] == [(Step.PROBED, False),
                                                          (Step.FAILED, True)]
    assert store.active_version("cam") == 1


def test_a_finished_deployment_cannot_finish_again(store: StateStore) -> None:
    dep = deploy(store, 1)
    store.commit_deployment(dep)
    with pytest.raises(StateStoreError, match="already committed"):
        store.fail_deployment(dep, "late")


def test_one_deployment_per_model_at_a_time(store: StateStore) -> None:
    deploy(store, 1)
    with pytest.raises(StateStoreError, match="already in progress"):
        store.begin_deployment("cam", DeploymentKind.ROLLBACK, to_version=2)


def test_an_unrecorded_version_cannot_become_active(store: StateStore) -> None:
    with pytest.raises(StateStoreError, match="not recorded on this device"):
        store.commit_deployment(deploy(store, 7))


def test_removing_the_active_version_leaves_none_active(store: StateStore) -> None:
    store.commit_deployment(deploy(store, 2))
    with pytest.raises(StateStoreError, match="is active"):
        store.remove_version("cam", 2)
    remove = store.begin_deployment("cam", DeploymentKind.REMOVE, to_version=2)
    store.commit_deployment(remove)
    assert store.active_version("cam") is None and store.version("cam", 2) is None


def test_a_deployment_found_in_progress_at_start_up_is_interrupted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = StateStore.open(state)
    first.upsert_version(VersionRecord("cam", 1, str(tmp_path), "0" * 64, 1))
    dep = deploy(first, 1)
    first.close()
    again = StateStore.open(state)
    try:
        found = again.deployment(dep)
        assert found.status is DeploymentStatus.INTERRUPTED
        assert "last step reached: switched" in found.reason
        assert again.active_version("cam") is None
    finally:
        again.close()
