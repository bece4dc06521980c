"""The checked-in edge.agent.v1 stubs match what grpcio-tools generates from the .proto today."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.management import regen
from edge_agent.protogen import GeneratorUnavailableError


def test_checked_in_stubs_are_fresh(tmp_path: Path) -> None:
    try:  # grpcio-tools GRPCIO_TOOLS, in a cached venv of its own when not installed here
        written = regen.generate(tmp_path / "gen")
    except GeneratorUnavailableError as exc:  # no registry and nothing cached
        pytest.skip(str(exc))
    fresh = {p.name: p.read_text() for p in written}
    checked_in = {p.name: p.read_text() for p in regen.GENERATED_DIR.iterdir()
                  if p.is_file() and p.suffix in (".py", ".pyi")}
    assert sorted(fresh) == sorted(checked_in), "run: python -m edge_agent.management.regen"
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not stale, f"stale stubs {stale}; run: python -m edge_agent.management.regen"


def test_service_is_versioned() -> None:
    from edge_agent.management.generated import management_pb2

    service = management_pb2.DESCRIPTOR.services_by_name["AgentManagement"]
    assert service.full_name == "edge.agent.v1.AgentManagement"
    assert {"GetInfo", "ListModels", "ListDeployments", "Deploy", "Activate", "Rollback",
            "RemoveVersion", "QueryMetrics", "WatchMetrics"} <= {m.name for m in service.methods}
