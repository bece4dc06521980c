"""The checked-in stubs match what grpcio-tools generates from the .proto files today."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.frontends.grpc import regen
from edge_agent.protogen import GeneratorUnavailableError


def test_checked_in_stubs_are_fresh(tmp_path: Path) -> None:
    try:  # grpcio-tools GRPCIO_TOOLS, in a cached venv of its own when not installed here
        written = regen.generate(tmp_path / "gen")
    except GeneratorUnavailableError as exc:  # no registry and nothing cached
        pytest.skip(str(exc))
    fresh = {p.name: p.read_text() for p in written}
    checked_in = {p.name: p.read_text() for p in regen.GENERATED_DIR.iterdir()
                  if p.is_file() and p.suffix in (".py", ".pyi")}
    assert sorted(fresh) == sorted(checked_in), "run: python -m edge_agent.frontends.grpc.regen"
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not stale, f"stale stubs {stale}; run: python -m edge_agent.frontends.grpc.regen"


def test_field_numbers_match_tritonclient() -> None:
    """Every field we declare has the same number and type as tritonclient's copy."""
    from tritonclient.grpc import model_config_pb2 as theirs_mc
    from tritonclient.grpc import service_pb2 as theirs

    from edge_agent.frontends.grpc.generated import grpc_service_pb2, model_config_pb2

    def check(ours, their_file) -> int:
        n = 0
        for name, desc in ours.message_types_by_name.items():
            n += check_message(desc, their_file.message_types_by_name[name])
        return n

    def check_message(desc, their) -> int:
        n = 0
        for f in desc.fields:
            tf = their.fields_by_name[f.name]
            assert (f.number, f.type, f.is_repeated) == (tf.number, tf.type, tf.is_repeated), \
                f"{desc.full_name}.{f.name}"
            n += 1
        for nested in desc.nested_types:
            n += check_message(nested, their.nested_types_by_name[nested.name])
        return n

    assert check(grpc_service_pb2.DESCRIPTOR, theirs.DESCRIPTOR) > 100
    assert check(model_config_pb2.DESCRIPTOR, theirs_mc.DESCRIPTOR) > 20
    ours_methods = {m.name for m in
                    grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods}
    their_methods = {m.name for m in
                     theirs.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods}
    assert ours_methods <= their_methods
    assert {"ModelInfer", "ModelStreamInfer", "ModelStatistics",
            "RepositoryModelLoad"} <= ours_methods
