"""A full disk during a deploy, for real: the agent's state dir is a small tmpfs filled up to a
chosen number of free bytes (skipped, with the reason, where mounting is not allowed).

The upload or the extraction runs out of space: the deploy fails with a message that says the
disk is full, no upload or half-extracted version is left, the active version keeps serving,
and once space is freed the same deploy succeeds. The disk filling up at any later step (the
state database can no longer be written) fails the deployment too and never leaves the model
"in progress"; a rollback on a full disk, and changes on a read-only state dir, get one clean
line each."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.client.agent_client import AgentClient, ManagementError
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.deploy.errors import DiskFullError
from edge_agent.deploy.manager import ManagerSettings, ModelManager
from edge_agent.state import StateStore, Step
from packager.build import build_bundles
from packager.samples import make_mlp
from tests.support.bundles import PROFILE, Bundles
from tests.support.harness import sections, start_agent
from tests.support.small_disk import tmpfs
from tests.support.traffic import integrity, served_version

SIZE = 24 << 20
X = np.random.default_rng(8).standard_normal((2, 64)).astype(np.float32)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs mounted on ``tmp_path/state``, unmounted afterwards."""
    with tmpfs(tmp_path / "state", SIZE) as mount:
        yield mount


def _fill(mount: Path, leave: int) -> Path:
    """Write a filler file so that about ``leave`` bytes stay free."""
    filler = mount / "filler"
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    with open(filler, "ab") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


@pytest.fixture(scope="module")
def big_bundle(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mlp version 9, ~1 MiB (a wide hidden layer), signed with the trusted key."""
    root = tmp_path_factory.mktemp("wide")
    src = make_mlp(root / "wide.onnx", hidden=4096, seed=9)
    (bundle,) = build_bundles(src, name="mlp", version=9, profiles=[PROFILE],
                              out_dir=root / "out", key_path=bundles.private_key,
                              dynamic_batch=True)
    return bundle


@pytest.mark.parametrize("where", ["upload", "extract"])
def test_disk_full_fails_the_deploy_cleanly_and_a_retry_succeeds(
        small_disk: Path, bundles: Bundles, big_bundle: Path, where: str) -> None:
    options = sections("disk-full", bundles.public_key)
    agent = start_agent(small_disk, options)
    try:
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[1]).ok
            history = [d.id for d in client.deployments()]
            size = big_bundle.stat().st_size
            # upload: not even the upload fits; extract: the upload fits, its copy does not
            filler = _fill(small_disk, 64 << 10 if where == "upload" else size + size // 2)
            if where == "upload":
                with pytest.raises(ManagementError) as err:
                    client.deploy(big_bundle)
                assert err.value.status == "RESOURCE_EXHAUSTED"
                message = str(err.value)
            else:
                result = client.deploy(big_bundle)
                assert not result.ok
                assert result.deployment is not None
                assert result.deployment.last_step == "verified"  # staging failed
                message = result.message
                assert message.startswith("staged failed: "), message
            assert "disk is full" in message and str(small_disk) in message, message
            # nothing else changed, nothing left behind
            assert sorted(p.name for p in (small_disk / "models" / "mlp").iterdir()) == ["1"]
            assert not any((small_disk / "incoming").iterdir())
            assert [v.version for v in client.models("mlp") if v.active] == [1]
            after = [d.id for d in client.deployments()]
            assert after[-len(history):] == history
            assert len(after) == len(history) + (0 if where == "upload" else 1)
            assert served_version(agent.grpc)[0] == "1"
            # space freed: the same bundle deploys
            filler.unlink()
            result = client.deploy(big_bundle)
            assert result.ok, result.message
            assert served_version(agent.grpc)[0] == "9"
    finally:
        agent.stop()
    assert integrity(small_disk) == {"state.db": "ok", "metrics.db": "ok"}


def _fill_up(mount: Path) -> Path:
    """Write a filler file until the file system has no byte left."""
    filler = mount / "filler-all"
    with open(filler, "ab", buffering=0) as f:
        for chunk in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * chunk)
    return filler


def _state_db_check(state_dir: Path) -> str:
    with contextlib.closing(sqlite3.connect(state_dir / "state.db")) as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


class _FillAt:
    """A step hook that fills the disk right after one step of the next deployment."""

    def __init__(self, mount: Path, step: Step) -> None:
        self.mount, self.step = mount, step
        self.armed = False
        self.filler: Path | None = None

    def __call__(self, deployment_id: int, step: Step) -> None:
        if self.armed and step is self.step:
            self.armed = False
            self.filler = _fill_up(self.mount)


@pytest.mark.parametrize("step", [Step.RECEIVED, Step.STAGED, Step.PROBED, Step.SWITCHED,
                                  Step.UNLOADED])
def test_a_full_disk_at_any_step_never_leaves_the_model_in_progress(
        small_disk: Path, bundles: Bundles, step: Step) -> None:
    hook = _FillAt(small_disk, step)
    dataplane = DataPlane(small_disk, autoload=False)
    store = StateStore.open(small_disk)
    manager = ModelManager(dataplane, store, ManagerSettings(
        trusted_keys=(bundles.public_key,), watch_window_s=0.0), step_hooks=[hook])
    try:
        manager.start()
        assert manager.deploy(bundles.mlp[1]).ok
        hook.armed = True
        try:
            outcome = manager.deploy(bundles.mlp[2])
            assert not outcome.ok
            message = outcome.message
        except DiskFullError as exc:
            message = str(exc)
        assert "the agent's disk is full" in message and str(small_disk) in message, message
        # what the store says is what is served, and the model is free for the next change
        assert store.active_version("mlp") == 1
        assert dataplane.infer(InferRequest("mlp", {"input": X})).version == 1
        with pytest.raises(DiskFullError, match="disk is full"):
            manager.deploy(bundles.mlp[3])  # still full: the clean message, not "in progress"
        assert hook.filler is not None
        hook.filler.unlink()
        deployed = manager.deploy(bundles.mlp[2])
        assert deployed.ok, deployed.message
        assert dataplane.infer(InferRequest("mlp", {"input": X})).version == 2
        assert store.in_progress() == []
        assert manager.rollback("mlp").ok
        statuses = [d.status.value for d in store.history("mlp")]
        assert statuses[:3] == ["committed", "committed", "failed"], statuses
    finally:
        manager.close()
        dataplane.close()
        store.close()
    assert _state_db_check(small_disk) == "ok"


def test_full_and_read_only_state_dir_answer_clean_errors_over_the_api(
        small_disk: Path, bundles: Bundles) -> None:
    options = sections("disk-full", bundles.public_key, metrics=False)
    agent = start_agent(small_disk, options)
    try:
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[1]).ok and client.deploy(bundles.mlp[2]).ok
            filler = _fill_up(small_disk)
            with pytest.raises(ManagementError) as err:
                client.rollback("mlp")
            assert err.value.status == "RESOURCE_EXHAUSTED"
            assert "the agent's disk is full" in str(err.value)
            filler.unlink()
            # a read-only view of the state dir (a read-only bind mount over it): files the
            # agent already holds open stay writable, anything new is refused with EROFS
            subprocess.run(["mount", "--bind", str(small_disk), str(small_disk)], check=True)
            try:
                subprocess.run(["mount", "-o", "remount,bind,ro", str(small_disk)], check=True)
                with pytest.raises(ManagementError) as err:
                    client.deploy(bundles.mlp[3])
                assert err.value.status == "FAILED_PRECONDITION", err.value
                assert "state directory is read-only" in str(err.value)
                assert served_version(agent.grpc)[0] == "2"
            finally:
                subprocess.run(["umount", str(small_disk)], check=True)
            assert client.rollback("mlp").ok
            assert served_version(agent.grpc)[0] == "1"
            assert client.deploy(bundles.mlp[3]).ok
            assert served_version(agent.grpc)[0] == "3"
    finally:
        agent.stop()
    assert _state_db_check(small_disk) == "ok"


def test_check_deploy_refuses_a_bundle_the_disk_cannot_hold(
        small_disk: Path, bundles: Bundles, big_bundle: Path) -> None:
    options = sections("disk-check", bundles.public_key)
    agent = start_agent(small_disk, options)
    try:
        with AgentClient(agent.management, token=agent.token) as client:
            size = big_bundle.stat().st_size
            filler = _fill(small_disk, size + size // 2)  # the upload fits, its copy does not
            check = client.check_deploy(big_bundle)
            assert check is not None and not check.ok and check.refusal == "no_space", check
            assert "disk is full" in check.message and "bytes needed" in check.message
            assert client.deployments() == []  # nothing uploaded, nothing recorded
            filler.unlink()
            fine = client.check_deploy(big_bundle)
            assert fine is not None and fine.ok, fine
    finally:
        agent.stop()
