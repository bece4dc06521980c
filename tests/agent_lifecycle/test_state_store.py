"""The state store on real SQLite files, including a real SIGKILL mid-deployment."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from edge_agent.errors import StateStoreError
from edge_agent.state import (
    DB_NAME,
    TOKEN_FILE,
    DeploymentKind,
    DeploymentStatus,
    StateStore,
    Step,
    VersionRecord,
    VersionState,
    load_or_create_token,
    tokens_equal,
)

REPO = Path(__file__).resolve().parents[2]
DEPLOY_STEPS = (Step.RECEIVED, Step.VERIFIED, Step.STAGED, Step.LOADED, Step.WARMED,
                Step.PROBED, Step.SWITCHED, Step.DRAINED, Step.UNLOADED)


def _version(model: str, v: int, tmp: Path) -> VersionRecord:
    return VersionRecord(model=model, version=v, path=str(tmp / model / str(v)),
                         manifest_sha256=f"{v:064x}", size_bytes=1000 * v)


def test_deploy_commit_changes_active_and_keeps_history(tmp_path: Path) -> None:
    with StateStore.open(tmp_path) as store:
        assert store.recovered == ()
        store.upsert_version(_version("resnet", 1, tmp_path))
        first = store.begin_deployment("resnet", DeploymentKind.DEPLOY, to_version=1)
        for step in DEPLOY_STEPS:
            store.record_step(first, step, f"{step} ok")
        assert store.active_version("resnet") is None
        done = store.commit_deployment(first, "deployed v1")
        assert done.status is DeploymentStatus.COMMITTED and done.from_version is None
        assert [s.step for s in done.steps] == [*DEPLOY_STEPS, Step.COMMITTED]
        assert store.active_version("resnet") == 1

        store.upsert_version(_version("resnet", 2, tmp_path))
        store.set_version_state("resnet", 2, VersionState.READY, load_ms=12.5,
                                rss_delta_bytes=4096)
        second = store.begin_deployment("resnet", DeploymentKind.DEPLOY, to_version=2)
        store.record_step(second, Step.RECEIVED)
        failed = store.fail_deployment(second, "probe returned NaN", failed_step=Step.PROBED)
        assert failed.status is DeploymentStatus.FAILED
        assert failed.last_step is Step.RECEIVED and failed.from_version == 1
        assert (failed.steps[-2].step, failed.steps[-2].ok) == (Step.PROBED, False)
        assert store.active_version("resnet") == 1

        v2 = store.version("resnet", 2)
        assert v2 is not None and v2.state is VersionState.READY
        assert (v2.load_ms, v2.rss_delta_bytes, v2.size_bytes) == (12.5, 4096, 2000)
        assert [d.id for d in store.history("resnet")] == [second, first]
        with pytest.raises(StateStoreError, match="already failed"):
            store.commit_deployment(second)

    with StateStore.open(tmp_path) as again:  # durable across reopen
        assert again.active_versions() == {"resnet": 1}
        assert [v.version for v in again.versions("resnet")] == [1, 2]
        assert again.integrity_check() == "ok"


def test_commit_refuses_an_unrecorded_version_and_leaves_active(tmp_path: Path) -> None:
    with StateStore.open(tmp_path) as store:
        dep = store.begin_deployment("m", DeploymentKind.ACTIVATE, to_version=7)
        with pytest.raises(StateStoreError, match="not recorded"):
            store.commit_deployment(dep)
        assert store.active_version("m") is None
        assert store.deployment(dep).status is DeploymentStatus.IN_PROGRESS


def test_one_deployment_in_progress_per_model(tmp_path: Path) -> None:
    with StateStore.open(tmp_path) as store:
        store.begin_deployment("a", DeploymentKind.DEPLOY, to_version=1)
        store.begin_deployment("b", DeploymentKind.DEPLOY, to_version=1)
        with pytest.raises(StateStoreError, match="already in progress"):
            store.begin_deployment("a", DeploymentKind.ROLLBACK, to_version=0)
        assert len(store.in_progress()) == 2


def test_remove_and_rollback(tmp_path: Path) -> None:
    with StateStore.open(tmp_path) as store:
        for v in (1, 2):
            store.upsert_version(_version("m", v, tmp_path))
            store.commit_deployment(store.begin_deployment("m", "deploy", to_version=v))
        with pytest.raises(StateStoreError, match="is active"):
            store.remove_version("m", 2)
        back = store.commit_deployment(
            store.begin_deployment("m", DeploymentKind.ROLLBACK, to_version=1), "user asked")
        assert (back.from_version, back.to_version) == (2, 1)
        assert store.active_version("m") == 1
        store.commit_deployment(store.begin_deployment("m", DeploymentKind.REMOVE, to_version=2))
        assert [v.version for v in store.versions("m")] == [1]
        assert store.active_version("m") == 1
        store.commit_deployment(store.begin_deployment("m", DeploymentKind.REMOVE, to_version=1))
        assert store.active_version("m") is None and store.versions("m") == []


def test_concurrent_writers_from_threads(tmp_path: Path) -> None:
    with StateStore.open(tmp_path) as store:
        def deploy(model: str) -> None:
            for v in range(1, 6):
                store.upsert_version(_version(model, v, tmp_path))
                dep = store.begin_deployment(model, DeploymentKind.DEPLOY, to_version=v)
                for step in DEPLOY_STEPS:
                    store.record_step(dep, step)
                store.commit_deployment(dep)

        threads = [threading.Thread(target=deploy, args=(f"m{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert store.active_versions() == {f"m{i}": 5 for i in range(4)}
        assert len(store.history(limit=100)) == 20


_CHILD = textwrap.dedent("""
    import sys
    from edge_agent.state import DeploymentKind, StateStore, Step, VersionRecord
    state_dir, mode = sys.argv[1], sys.argv[2]
    steps = [Step.RECEIVED, Step.VERIFIED, Step.STAGED, Step.LOADED, Step.WARMED,
             Step.PROBED, Step.SWITCHED, Step.DRAINED, Step.UNLOADED]
    store = StateStore.open(state_dir)
    v = max([r.version for r in store.versions("m")] or [0])
    while True:
        v += 1
        store.upsert_version(VersionRecord("m", v, f"/x/{v}", "0" * 64, v))
        dep = store.begin_deployment("m", DeploymentKind.DEPLOY, to_version=v)
        for step in steps:
            store.record_step(dep, step, "x" * 200)
            if mode == "park" and step == Step.SWITCHED:
                print("PARKED", dep, flush=True)
                sys.stdin.read()
        store.commit_deployment(dep)
        print("COMMITTED", v, flush=True)
""")


def _spawn(state_dir: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(state_dir), mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


def test_sigkill_while_parked_at_switched_is_marked_interrupted(tmp_path: Path) -> None:
    proc = _spawn(tmp_path, "park")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[0] == "PARKED"
        dep_id = int(line[1])
    finally:
        _kill(proc)
    with StateStore.open(tmp_path) as store:
        assert store.integrity_check() == "ok"
        assert [d.id for d in store.recovered] == [dep_id]
        dep = store.recovered[0]
        assert dep.status is DeploymentStatus.INTERRUPTED
        assert dep.last_step is Step.SWITCHED
        assert "switched" in dep.reason
        assert dep.steps[-1].step is Step.INTERRUPTED
        assert store.active_version("m") is None  # the switch was never committed
        assert store.in_progress() == []
    with StateStore.open(tmp_path) as store:  # recovery happens once
        assert store.recovered == ()


def test_sigkill_at_a_random_moment_leaves_a_consistent_database(tmp_path: Path) -> None:
    for round_ in range(3):
        proc = _spawn(tmp_path, "loop")
        try:
            assert proc.stdout is not None
            for _ in range(3 + round_ * 2):  # let it commit a few, then kill mid-flight
                assert proc.stdout.readline().startswith("COMMITTED")
        finally:
            _kill(proc)
        db = sqlite3.connect(tmp_path / DB_NAME)
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        db.close()
        with StateStore.open(tmp_path) as store:
            assert store.integrity_check() == "ok"
            history = store.history("m", limit=1000)
            committed = [d for d in history if d.status is DeploymentStatus.COMMITTED]
            assert committed, "nothing committed before the kill"
            # The active version is exactly the newest committed deployment's target.
            assert store.active_version("m") == committed[0].to_version
            assert all(d.status is not DeploymentStatus.IN_PROGRESS for d in history)
            assert len(store.recovered) <= 1
            for d in store.recovered:
                assert d.status is DeploymentStatus.INTERRUPTED
                reached = [s.step for s in d.steps if s.step is not Step.INTERRUPTED]
                assert d.last_step == (reached[-1] if reached else None)
            for d in committed:
                assert [s.step for s in d.steps] == [*DEPLOY_STEPS, Step.COMMITTED]


def test_token_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    state = tmp_path / "state"
    token = load_or_create_token(state)
    path = state / TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 40
    assert load_or_create_token(state) == token
    path.chmod(0o644)
    assert load_or_create_token(state) == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tokens_equal(token, token) and tokens_equal(token.encode(), token)
    assert not tokens_equal(token[:-1] + ("A" if token[-1] != "A" else "B"), token)
    assert not tokens_equal("", token) and not tokens_equal(None, token)
    other = load_or_create_token(tmp_path / "other")
    assert other != token


def test_empty_token_file_is_an_actionable_error(tmp_path: Path) -> None:
    (tmp_path / TOKEN_FILE).write_text("")
    with pytest.raises(StateStoreError, match="delete it"):
        load_or_create_token(tmp_path)


def test_corrupt_database_is_an_actionable_error(tmp_path: Path) -> None:
    (tmp_path / DB_NAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateStoreError, match="move it aside"):
        StateStore.open(tmp_path)
