"""The grpcio hooks' self-test (edge_agent.grpc_internals) on the installed grpcio: every
hook found; a hook grpcio stopped reading (simulated by renaming what the agent sets or
looks for) found missing, alone; one warning per process; and the handlers built from the
descriptors match what the generated ``add_*_to_server`` registers."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import grpc
import pytest

from edge_agent import grpc_internals
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.frontends.grpc.generated import health_pb2, health_pb2_grpc
from edge_agent.frontends.grpc.health import HealthServicer

HOOKS = ["thread_pool", "non_blocking", "lean_future", "rpc_event"]
# how each hook is made to vanish: grpc no longer reads the attribute the agent sets, the
# event is elsewhere among the pool's arguments, or grpc uses more of a Future than provided
BREAK = {"thread_pool": ("THREAD_POOL_ATTR", "experimental_pool_renamed"),
         "non_blocking": ("NON_BLOCKING_ATTR", "experimental_callback_renamed"),
         "lean_future": ("FUTURE_METHODS", frozenset()),
         "rpc_event": ("EVENT_INDEX", 0)}


@pytest.fixture(autouse=True)
def fresh_hooks() -> Iterator[None]:
    grpc_internals.reset()
    yield
    grpc_internals.reset()


def test_every_hook_is_found_on_the_installed_grpcio() -> None:
    found = grpc_internals.self_test()
    assert found.missing() == [], found
    assert found.grpcio == grpc.__version__
    assert found.summary() == f"grpcio {grpc.__version__}: all 4 server hooks present"


@pytest.mark.parametrize("hook", HOOKS)
def test_a_hook_grpc_stopped_honouring_is_found_missing_alone(
        hook: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name, value = BREAK[hook]
    monkeypatch.setattr(grpc_internals, name, value)
    found = grpc_internals.self_test()
    assert found.missing() == [hook]
    assert found.problem == ""
    assert hook in found.summary()


def test_missing_hooks_are_warned_about_once_per_process(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="edge_agent.grpc_internals")
    monkeypatch.setattr(grpc_internals, "EVENT_INDEX", 0)
    monkeypatch.setattr(grpc_internals, "NON_BLOCKING_ATTR", "experimental_callback_renamed")
    first = grpc_internals.hooks()
    assert grpc_internals.hooks() is first
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "missing non_blocking, rpc_event" in warnings[0]
    assert "abuse protections are reduced" in warnings[0]
    assert "grpc.request_arrival_s is not enforced" in warnings[0]
    assert "each open ModelStreamInfer stream holds a handler thread" in warnings[0]


def test_all_present_is_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="edge_agent.grpc_internals")
    assert grpc_internals.hooks().missing() == []
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "all 4 server hooks present" in caplog.records[0].getMessage()


class _Registered:
    """Collects what a generated ``add_*_to_server`` registers (this comparison only)."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Any]) -> None:
        self.handlers = dict(handlers)


def _kind(h: Any) -> tuple[Any, ...]:
    return (h.request_streaming, h.response_streaming, h.request_deserializer,
            h.response_serializer, grpc_internals.behavior_of(h))


def test_handlers_from_the_descriptor_match_the_generated_registration() -> None:
    servicer = pb_grpc.GRPCInferenceServiceServicer()
    generated = _Registered()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, generated)
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    built = grpc_internals.service_handlers(servicer, service)
    assert len(built) == len(service.methods) == 20  # KServe v2 + Triton's extensions
    assert {n: _kind(h) for n, h in built.items()} == {
        n: _kind(h) for n, h in generated.handlers.items()}

    checker = HealthServicer()
    generated = _Registered()
    health_pb2_grpc.add_HealthServicer_to_server(checker, generated)
    built = grpc_internals.service_handlers(checker,
                                            health_pb2.DESCRIPTOR.services_by_name["Health"])
    assert {n: _kind(h) for n, h in built.items()} == {
        n: _kind(h) for n, h in generated.handlers.items()}


def test_rebuild_keeps_the_kind_and_the_serializers() -> None:
    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        return request

    def decode(data: bytes) -> bytes:
        return data[::-1]

    for make in (grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler,
                 grpc.stream_unary_rpc_method_handler, grpc.stream_stream_rpc_method_handler):
        original = make(len, request_deserializer=bytes, response_serializer=str.encode)
        new = grpc_internals.rebuild(original, behavior=answer)
        assert (new.request_streaming, new.response_streaming) == (
            original.request_streaming, original.response_streaming)
        assert grpc_internals.behavior_of(new) is answer
        assert (new.request_deserializer, new.response_serializer) == (bytes, str.encode)
        assert grpc_internals.rebuild(original, request_deserializer=decode
                                      ).request_deserializer is decode


def test_doctor_reports_the_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_agent.doctor import WARN, run_doctor

    def hooks_finding() -> Any:
        grpc_internals.reset()
        found = [f for f in run_doctor() if f.check == "grpcio server hooks"]
        assert len(found) == 1
        return found[0]

    ok = hooks_finding()
    assert (ok.status, ok.detail) == ("ok", f"grpcio {grpc.__version__}: all 4 server hooks "
                                            "present")
    monkeypatch.setattr(grpc_internals, "THREAD_POOL_ATTR", "experimental_pool_renamed")
    warn = hooks_finding()
    assert warn.status == WARN
    assert "missing thread_pool" in warn.detail
    assert "health share the inference handler pool" in warn.detail
    assert "edge-toolkit[agent]" in warn.fix
