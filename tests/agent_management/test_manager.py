"""The model manager on a real data plane, real SQLite state and real bundles (in-process)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.deploy import DeploymentBusyError, ManagerError, VersionInUseError
from edge_agent.deploy.manager import ManagerSettings, ModelManager
from edge_agent.errors import AgentError
from edge_agent.state import DeploymentKind, DeploymentStatus, StateStore, Step
from tests.support.bundles import Bundles
from tests.support.eventually import eventually

X = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)


@dataclass
class Managed:
    manager: ModelManager
    dataplane: DataPlane
    store: StateStore
    state_dir: Path

    def infer(self, x: np.ndarray = X) -> tuple[int, np.ndarray]:
        r = self.dataplane.infer(InferRequest("mlp", {"input": x}))
        return r.version, r.outputs["probs"]

    def version_dirs(self) -> list[str]:
        return sorted(p.name for p in (self.state_dir / "models" / "mlp").iterdir())


def _managed(state_dir: Path, bundles: Bundles, **settings: object) -> Managed:
    opts = {"trusted_keys": (bundles.public_key,), "watch_window_s": 0.0, **settings}
    dataplane = DataPlane(state_dir, autoload=False)
    store = StateStore.open(state_dir)
    manager = ModelManager(dataplane, store, ManagerSettings(**opts))  # type: ignore[arg-type]
    manager.start()
    return Managed(manager, dataplane, store, state_dir)


@pytest.fixture
def managed(tmp_path: Path, bundles: Bundles) -> Iterator[Managed]:
    m = _managed(tmp_path / "state", bundles)
    try:
        yield m
    finally:
        m.manager.close()
        m.dataplane.close()
        m.store.close()


def test_deploy_switches_versions_and_records_each_step(managed: Managed,
                                                        bundles: Bundles) -> None:
    events = []
    first = managed.manager.deploy(bundles.mlp[1], on_event=events.append)
    assert first.ok, first.message
    version, out = managed.infer()
    assert version == 1
    np.testing.assert_allclose(out, bundles.reference(1, X), rtol=1e-4, atol=1e-5)

    second = managed.manager.deploy(bundles.mlp[2])
    assert second.ok and second.active_version == 2
    version, out = managed.infer()
    assert version == 2
    np.testing.assert_allclose(out, bundles.reference(2, X), rtol=1e-4, atol=1e-5)
    assert not np.allclose(bundles.reference(1, X), bundles.reference(2, X))

    steps = [s.step for s in second.deployment.steps]
    assert steps == [Step.RECEIVED, Step.VERIFIED, Step.STAGED, Step.LOADED, Step.WARMED,
                     Step.PROBED, Step.PARITY, Step.SWITCHED, Step.DRAINED, Step.UNLOADED,
                     Step.COMMITTED]
    assert [e.step for e in events][-1] == "committed"
    assert "signed by key" in second.deployment.steps[1].message
    views = {v.version: v for v in managed.manager.versions("mlp")}
    assert views[2].active and views[2].state == "READY"
    assert views[1].state == "UNAVAILABLE" and views[1].stored_state == "unloaded"
    assert views[2].load_ms is not None and views[2].load_ms > 0
    assert views[2].rss_delta_bytes is not None
    assert managed.store.active_version("mlp") == 2


def test_rollback_activate_force_reload_and_remove(managed: Managed, bundles: Bundles) -> None:
    m = managed.manager
    assert m.deploy(bundles.mlp[1]).ok and m.deploy(bundles.mlp[2]).ok
    assert m.rollback_target("mlp") == 1
    back = m.rollback("mlp")
    assert back.ok and back.deployment.kind is DeploymentKind.ROLLBACK
    assert managed.infer()[0] == 1

    again = m.activate("mlp", 2)
    assert again.ok and managed.infer()[0] == 2
    with pytest.raises(VersionInUseError, match="already active"):
        m.activate("mlp", 2)
    reload = m.activate("mlp", 2, force=True)
    assert reload.ok and "fresh copy" in reload.deployment.steps[0].message
    version, out = managed.infer()
    assert version == 2
    np.testing.assert_allclose(out, bundles.reference(2, X), rtol=1e-4, atol=1e-5)

    with pytest.raises(VersionInUseError, match="active"):
        m.remove("mlp", 2)
    removed = m.remove("mlp", 1)
    assert removed.ok and managed.version_dirs() == ["2"]
    assert [v.version for v in m.versions("mlp")] == [2]
    kinds = [d.kind for d in m.history("mlp")]
    assert kinds[:4] == [DeploymentKind.REMOVE, DeploymentKind.ACTIVATE,
                         DeploymentKind.ACTIVATE, DeploymentKind.ROLLBACK]


def test_incompatible_arch_is_refused_naming_the_device_profile(managed: Managed,
                                                                bundles: Bundles) -> None:
    assert managed.manager.deploy(bundles.mlp[1]).ok
    outcome = managed.manager.deploy(bundles.arm64)
    assert not outcome.ok
    assert outcome.deployment.status is DeploymentStatus.FAILED
    assert "arm64-cpu-onnxruntime" in outcome.message
    assert f"this device runs profile {managed.manager.device.profile}" in outcome.message
    assert managed.infer()[0] == 1 and managed.version_dirs() == ["1"]


def test_unsigned_bundle_is_refused_unless_allowed(tmp_path: Path, managed: Managed,
                                                   bundles: Bundles) -> None:
    outcome = managed.manager.deploy(bundles.unsigned)
    assert not outcome.ok and "unsigned" in outcome.message
    assert outcome.deployment.steps[-2].step is Step.VERIFIED
    assert not outcome.deployment.steps[-2].ok
    assert not (managed.state_dir / "models" / "mlp").exists()
    lenient = _managed(tmp_path / "lenient", bundles, allow_unsigned=True)
    try:
        assert lenient.manager.deploy(bundles.unsigned).ok
        assert lenient.infer()[0] == 5
    finally:
        lenient.dataplane.close()
        lenient.store.close()


def test_failed_health_probe_leaves_the_old_version_serving(managed: Managed,
                                                            bundles: Bundles) -> None:
    assert managed.manager.deploy(bundles.mlp[1]).ok
    outcome = managed.manager.deploy(bundles.nan)
    assert not outcome.ok and "NaN" in outcome.message
    failed_step = [s for s in outcome.deployment.steps if not s.ok]
    assert [s.step for s in failed_step] == [Step.PROBED]
    assert managed.store.active_version("mlp") == 1
    assert managed.infer()[0] == 1
    view = {v.version: v for v in managed.manager.versions("mlp")}[6]
    assert view.stored_state == "failed" and "NaN" in view.load_error
    assert managed.manager.rollback_target("mlp") is None  # a failed version is no target


def test_error_rate_after_switch_rolls_back_by_itself(tmp_path: Path, bundles: Bundles) -> None:
    m = _managed(tmp_path / "state", bundles, watch_window_s=60.0, min_requests=10,
                 error_threshold=0.5)
    try:
        assert m.manager.deploy(bundles.mlp[1]).ok
        deployed = m.manager.deploy(bundles.fragile)
        assert deployed.ok, deployed.message  # warm-up and probe pass
        bad = np.full((1, 64), 100.0, np.float32)
        failures = 0
        for _ in range(30):
            try:
                m.dataplane.infer(InferRequest("mlp", {"input": bad}))
            except AgentError:
                failures += 1
        assert failures > 0
        eventually(lambda: m.store.active_version("mlp") == 1, timeout=60, interval=0.1,
                   message="the automatic rollback to version 1 never committed")
        latest = m.manager.history("mlp")[0]
        assert latest.kind is DeploymentKind.AUTO_ROLLBACK
        assert latest.status is DeploymentStatus.COMMITTED
        assert "automatic rollback" in latest.reason and "failed" in latest.reason
        assert m.infer()[0] == 1
    finally:
        m.manager.close()
        m.dataplane.close()
        m.store.close()


def test_keep_last_k_never_deletes_the_rollback_target(tmp_path: Path,
                                                       bundles: Bundles) -> None:
    m = _managed(tmp_path / "state", bundles, keep_versions=1)
    try:
        for v in (1, 2, 3):
            assert m.manager.deploy(bundles.mlp[v]).ok
        assert m.version_dirs() == ["2", "3"]  # 3 active, 2 the rollback target
        assert m.manager.rollback("mlp").ok and m.infer()[0] == 2
    finally:
        m.dataplane.close()
        m.store.close()


def test_same_version_with_other_content_is_refused(managed: Managed, bundles: Bundles,
                                                    tmp_path: Path) -> None:
    from packager.build import build_bundles

    assert managed.manager.deploy(bundles.mlp[1]).ok
    (other,) = build_bundles(bundles.sources[2], name="mlp", version=1,
                             profiles=["x86_64-cpu-onnxruntime"], out_dir=tmp_path / "o",
                             key_path=bundles.private_key, dynamic_batch=True)
    outcome = managed.manager.deploy(other)
    assert not outcome.ok and "different content" in outcome.message
    np.testing.assert_allclose(managed.infer()[1], bundles.reference(1, X), rtol=1e-4,
                               atol=1e-5)


def test_a_second_change_while_one_runs_is_refused(managed: Managed, bundles: Bundles) -> None:
    assert managed.manager.deploy(bundles.mlp[1]).ok
    with managed.manager.locks.hold("mlp"), pytest.raises(DeploymentBusyError,
                                                           match="in progress"):
        managed.manager.rollback("mlp", 1)


def test_active_version_broken_on_disk_falls_back_at_start(tmp_path: Path,
                                                           bundles: Bundles) -> None:
    state = tmp_path / "state"
    first = _managed(state, bundles)
    try:
        assert first.manager.deploy(bundles.mlp[1]).ok and first.manager.deploy(bundles.mlp[2]).ok
    finally:
        first.dataplane.close()
        first.store.close()
    model = next((state / "models" / "mlp" / "2").rglob("*.onnx"))
    model.write_bytes(model.read_bytes()[:-16] + b"\0" * 16)  # bit rot: hash no longer matches
    again = _managed(state, bundles)
    try:
        assert again.store.active_version("mlp") == 1
        assert again.infer()[0] == 1
        latest = again.manager.history("mlp")[0]
        assert latest.kind is DeploymentKind.AUTO_ROLLBACK
        assert "failed to load at start-up" in latest.reason and "sha256" in latest.reason
    finally:
        again.dataplane.close()
        again.store.close()


def test_failed_versions_are_pruned_before_good_ones(tmp_path: Path, bundles: Bundles) -> None:
    m = _managed(tmp_path / "state", bundles, keep_versions=2)
    try:
        assert m.manager.deploy(bundles.mlp[1]).ok
        assert not m.manager.deploy(bundles.nan).ok  # version 6 stays on disk as failed
        assert m.version_dirs() == ["1", "6"]
        assert m.manager.deploy(bundles.mlp[2]).ok and m.manager.deploy(bundles.mlp[3]).ok
        assert m.version_dirs() == ["2", "3"]  # 6 (failed) and then 1 (oldest) went
    finally:
        m.dataplane.close()
        m.store.close()


def test_remove_model_deletes_every_version_and_a_deploy_brings_it_back(
        managed: Managed, bundles: Bundles) -> None:
    m = managed.manager
    assert m.deploy(bundles.mlp[1]).ok and m.deploy(bundles.mlp[2]).ok
    gone = m.remove_model("mlp")
    assert gone.ok and gone.active_version is None
    assert m.versions("mlp") == [] and managed.version_dirs() == []
    assert not managed.dataplane.model_ready("mlp")
    with pytest.raises(AgentError):  # requests find nothing to load
        managed.infer()
    assert [d.kind for d in m.history("mlp")][:2] == [DeploymentKind.REMOVE] * 2
    with pytest.raises(AgentError, match="not on this device"):
        m.remove_model("mlp")
    assert m.deploy(bundles.mlp[3]).ok
    assert managed.infer()[0] == 3


def test_kserve_unload_and_load_keeps_the_active_version(managed: Managed,
                                                         bundles: Bundles) -> None:
    m = managed.manager
    assert m.deploy(bundles.mlp[1]).ok and m.deploy(bundles.mlp[2]).ok and m.rollback("mlp").ok
    m.unload_model("mlp")  # what tritonclient.unload_model asks for
    assert not managed.dataplane.model_ready("mlp")
    m.load_model("mlp")
    assert managed.infer()[0] == 1  # still the committed active version, not the highest
    assert not managed.dataplane.model_ready("mlp", 2)  # retained versions stay on disk only


def test_a_second_rollback_never_returns_to_the_version_rolled_back_from(
        managed: Managed, bundles: Bundles) -> None:
    m = managed.manager
    assert m.deploy(bundles.mlp[1]).ok and m.deploy(bundles.mlp[2]).ok
    plan = m.rollback_plan("mlp")
    assert (plan.active, plan.target) == (2, 1) and "active before 2" in plan.why
    back = m.rollback("mlp")
    assert back.ok and managed.infer()[0] == 1
    assert back.deployment.steps[0].step is Step.RECEIVED  # the target, before anything loads
    assert "rollback target: version 1 was active before 2" in back.deployment.steps[0].message
    assert "version 1 is active (was 2)" in back.message
    plan = m.rollback_plan("mlp")
    assert plan.target is None and "rolled back from" in plan.why, plan
    with pytest.raises(ManagerError, match=r"no earlier version .* not going back to "
                                           r"version\(s\) \[2\]"):
        m.rollback("mlp")
    assert managed.infer()[0] == 1 and managed.store.active_version("mlp") == 1
    assert m.rollback("mlp", 2).ok  # an explicit target is always allowed
    assert managed.infer()[0] == 2


def test_rollbacks_walk_back_through_history(managed: Managed, bundles: Bundles) -> None:
    m = managed.manager
    for v in (1, 2, 3):
        assert m.deploy(bundles.mlp[v]).ok
    assert m.rollback("mlp").active_version == 2
    assert m.rollback("mlp").active_version == 1  # not 3: it was rolled back from
    assert m.rollback_target("mlp") is None
    assert m.activate("mlp", 2).ok  # activated again on purpose: a target once more
    assert m.deploy(bundles.mlp[3], force=True).ok  # 3 again, same content
    assert m.rollback_plan("mlp").target == 2


def test_auto_rollback_marks_the_bad_version_as_no_target(tmp_path: Path,
                                                         bundles: Bundles) -> None:
    m = _managed(tmp_path / "state", bundles)
    try:
        for v in (1, 2):
            assert m.manager.deploy(bundles.mlp[v]).ok
        assert m.manager.activate("mlp", 1, kind=DeploymentKind.AUTO_ROLLBACK,
                                  reason="automatic rollback: test").ok
        assert m.manager.rollback_target("mlp") is None
    finally:
        m.manager.close()
        m.dataplane.close()
        m.store.close()


def _model_file(state: Path, version: int) -> Path:
    return next((state / "models" / "mlp" / str(version)).rglob("*.onnx"))


def test_a_damaged_retained_version_is_removed_at_start_and_a_redeploy_restores_it(
        tmp_path: Path, bundles: Bundles) -> None:
    state = tmp_path / "state"
    first = _managed(state, bundles)
    try:
        assert first.manager.deploy(bundles.mlp[1]).ok and first.manager.deploy(bundles.mlp[2]).ok
    finally:
        first.dataplane.close()
        first.store.close()
    _model_file(state, 1).unlink()  # a file of the retained version 1 is gone
    again = _managed(state, bundles)
    try:
        assert again.version_dirs() == ["2"] and again.store.version("mlp", 1) is None
        assert again.infer()[0] == 2
        deployed = again.manager.deploy(bundles.mlp[1])
        assert deployed.ok, deployed.message
        version, out = again.infer()
        assert version == 1
        np.testing.assert_allclose(out, bundles.reference(1, X), rtol=1e-4, atol=1e-5)
    finally:
        again.dataplane.close()
        again.store.close()


def test_a_damaged_version_is_extracted_again_at_deploy(managed: Managed,
                                                        bundles: Bundles) -> None:
    m = managed.manager
    assert m.deploy(bundles.mlp[1]).ok and m.deploy(bundles.mlp[2]).ok
    model = _model_file(managed.state_dir, 1)
    model.write_bytes(model.read_bytes()[:-16] + b"\0" * 16)  # altered while the agent runs
    outcome = m.deploy(bundles.mlp[1])
    assert outcome.ok, outcome.message
    staged = next(s for s in outcome.deployment.steps if s.step is Step.STAGED)
    assert "extracted again" in staged.message and "sha256" in staged.message
    version, out = managed.infer()
    assert version == 1
    np.testing.assert_allclose(out, bundles.reference(1, X), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("force", [True, False])
def test_a_damaged_active_version_is_never_served_and_a_redeploy_repairs_it(
        tmp_path: Path, bundles: Bundles, force: bool) -> None:
    state = tmp_path / "state"
    first = _managed(state, bundles)
    try:
        assert first.manager.deploy(bundles.mlp[1]).ok
    finally:
        first.dataplane.close()
        first.store.close()
    _model_file(state, 1).unlink()  # the active version lost a file
    again = _managed(state, bundles)
    try:
        assert not again.dataplane.model_ready("mlp")  # not served, and nothing to fall back to
        outcome = again.manager.deploy(bundles.mlp[1], force=force)
        assert outcome.ok, outcome.message
        assert again.infer()[0] == 1
        again.manager.deploy(bundles.mlp[2])
        assert again.manager.deploy(bundles.mlp[1]).ok  # an ordinary deploy back works too
    finally:
        again.manager.close()
        again.dataplane.close()
        again.store.close()


def test_a_damaged_active_version_that_fell_back_can_be_redeployed(tmp_path: Path,
                                                                    bundles: Bundles) -> None:
    state = tmp_path / "state"
    first = _managed(state, bundles)
    try:
        assert first.manager.deploy(bundles.mlp[1]).ok and first.manager.deploy(bundles.mlp[2]).ok
    finally:
        first.dataplane.close()
        first.store.close()
    model = _model_file(state, 2)
    model.write_bytes(model.read_bytes()[:-16] + b"\0" * 16)
    again = _managed(state, bundles)
    try:
        assert again.infer()[0] == 1  # fell back at start
        outcome = again.manager.deploy(bundles.mlp[2])
        assert outcome.ok, outcome.message
        version, out = again.infer()
        assert version == 2
        np.testing.assert_allclose(out, bundles.reference(2, X), rtol=1e-4, atol=1e-5)
    finally:
        again.dataplane.close()
        again.store.close()
