"""The front ends' one error map, and each gRPC servicer's one error path (status.rpc_errors)
on a real gRPC server on 127.0.0.1."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from edge_agent.errors import AgentError, ErrorCode, ModelNotFoundError, QueueFullError
from edge_agent.frontends.common.errors import STATUS, error_message, http_status
from edge_agent.frontends.grpc import status

log = logging.getLogger("tests.error_path")
_errors = status.rpc_errors(log, "test service")
_stream_errors = status.rpc_stream_errors(log, "test service")


def test_every_error_code_has_one_grpc_and_one_http_status() -> None:
    assert set(STATUS) == set(ErrorCode)
    for code, wire in STATUS.items():
        exc = type("Coded", (AgentError,), {"code": code})("why")
        assert status.grpc_code(exc) is status.GRPC_CODES[code]
        assert status.GRPC_CODES[code].name == wire.grpc
        assert http_status(exc) == wire.http and 400 <= wire.http < 600
    bug = ValueError("boom")
    assert status.grpc_code(bug) is grpc.StatusCode.INTERNAL and http_status(bug) == 500
    assert error_message(bug) == "internal error: ValueError: boom"


class _Servicer:
    @_errors
    def agent_error(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        raise ModelNotFoundError("model 'x' is not deployed")

    @_errors
    def bug(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        raise ValueError("boom")

    @_errors
    def aborted(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "its own status")
        return b""

    @_errors
    def fine(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return request[::-1]

    @_stream_errors
    def stream(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"one"
        raise QueueFullError("too many watchers")


@pytest.fixture
def channel() -> Iterator[grpc.Channel]:
    servicer = _Servicer()
    handlers = {name: grpc.unary_unary_rpc_method_handler(getattr(servicer, name))
                for name in ("agent_error", "bug", "aborted", "fine")}
    handlers["stream"] = grpc.unary_stream_rpc_method_handler(servicer.stream)
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield ch
    finally:
        server.stop(None).wait()


def _call(channel: grpc.Channel, name: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary(f"/t.T/{name}")(b"req", timeout=30)
    return info.value


def test_agent_error_gets_its_code_and_message(channel: grpc.Channel) -> None:
    err = _call(channel, "agent_error")
    assert err.code() is grpc.StatusCode.NOT_FOUND
    assert err.details() == "model 'x' is not deployed"


def test_a_bug_is_internal_and_logged_once(channel: grpc.Channel,
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger=log.name)
    err = _call(channel, "bug")
    assert err.code() is grpc.StatusCode.INTERNAL
    assert err.details() == "internal error: ValueError: boom"
    logged = [r for r in caplog.records if r.name == log.name]
    assert len(logged) == 1 and "test service" in logged[0].getMessage()
    assert logged[0].exc_info is not None


def test_a_handler_that_aborts_keeps_its_status(channel: grpc.Channel) -> None:
    err = _call(channel, "aborted")
    assert err.code() is grpc.StatusCode.PERMISSION_DENIED
    assert err.details() == "its own status"


def test_a_good_call_is_untouched(channel: grpc.Channel) -> None:
    assert channel.unary_unary("/t.T/fine")(b"abc", timeout=30) == b"cba"


def test_a_stream_ends_with_the_error_after_what_it_sent(channel: grpc.Channel) -> None:
    got = []
    with pytest.raises(grpc.RpcError) as info:
        for item in channel.unary_stream("/t.T/stream")(b"", timeout=30):
            got.append(item)
    assert got == [b"one"]
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.value.details() == "too many watchers"
