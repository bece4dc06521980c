"""The one rollback rule (edge_agent.rollback_rule) as the console's TUI preselects it: the same
target the agent acts on, from the client's copies of versions and history."""

from __future__ import annotations

from console.agent_view import AgentSnapshot
from edge_agent.client.types import DeploymentInfo, VersionInfo
from edge_agent.rollback_rule import rollback_target


def _version(v: int, active: bool, stored: str = "unloaded") -> VersionInfo:
    return VersionInfo(model="mlp", version=v, active=active, state="READY",
                       stored_state=stored, profile="p", backend="onnxruntime", load_ms=None,
                       rss_delta_bytes=None, load_error="", size_bytes=1, added_at=0.0)


def _dep(i: int, kind: str, frm: int | None, to: int, status: str = "committed"
         ) -> DeploymentInfo:
    return DeploymentInfo(id=i, model="mlp", kind=kind, from_version=frm, to_version=to,
                          status=status, last_step="committed", reason="", started_at=0.0,
                          ended_at=0.0)


def test_after_a_rollback_the_version_rolled_back_from_is_no_target() -> None:
    history = [_dep(3, "rollback", 2, 1), _dep(2, "deploy", 1, 2), _dep(1, "deploy", None, 1)]
    target, why = rollback_target(1, {1, 2}, history)
    assert target is None and "not going back to version(s) [2]" in why
    snapshot = AgentSnapshot(versions=(_version(1, True), _version(2, False)),
                             deployments=tuple(history))
    assert snapshot.rollback_target("mlp") is None


def test_history_order_wins_over_version_numbers_and_failures_are_skipped() -> None:
    history = [_dep(4, "activate", 3, 2), _dep(3, "deploy", 1, 3), _dep(2, "deploy", 4, 1),
               _dep(1, "deploy", None, 4), _dep(5, "deploy", 2, 5, status="failed")]
    history.sort(key=lambda d: -d.id)
    assert rollback_target(2, {1, 2, 3, 4}, history) == (3, "version 3 was active before 2")
    assert rollback_target(2, {1, 2, 4}, history)[0] == 1  # 3 gone from disk
    snapshot = AgentSnapshot(versions=(_version(1, False), _version(2, True),
                                       _version(3, False, stored="failed"), _version(4, False)),
                             deployments=tuple(history))
    assert snapshot.rollback_target("mlp") == 1


def test_without_history_the_highest_version_below_is_the_target() -> None:
    assert rollback_target(5, {2, 3, 5, 7}, []) == (3, "version 3 is the highest version "
                                                       "below 5 here")
