"""Many large requests at once (issue 27, typed contents' memory target): gRPC's transport took
in every admitted call's whole message before a handler asked for it (32 x 57 MiB: +1.5 GiB
for raw contents, +3 GiB for int64 typed contents refused unparsed), and a refused request's
bytes stayed alive with its refusal.

Now HTTP/2 flow control leaves unread messages with their senders, a few ModelInfer calls
receive at once (``[grpc] max_receive_bytes_in_flight`` / ``max_message_bytes``), the messages
held are charged to that budget before parsing, and a refusal keeps no bytes. The memory figure
is the agent subprocess's own (/proc/PID/status VmHWM, reset through clear_refs), with a
generous bound.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from benchmarks.attacks.typed_contents import int64_request
from edge_agent.config import load_config
from edge_agent.errors import ConfigError, QueueFullError
from edge_agent.frontends.common.typed_budget import OverBudget, TypedBudget
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.handlers import budgeted_deserializer
from edge_agent.frontends.grpc.received import KEY, ReceiveBudget, Received, claimed
from tests.security.abuse import peak_growth_mib
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess
from tests.support.traffic import X, infer_request

INFER = "/inference.GRPCInferenceService/ModelInfer"
FEATURES = 64  # the test MLP: input FP32 [batch, 64]
CALLERS = 24
MESSAGE_MIB = 32
GROWTH_BOUND_MIB = 640
"""Twice the default 256 MiB budget plus margin; before the fix this burst took about
1,100 MiB or more (every message received at once, and each refused one kept alive)."""


@pytest.fixture(scope="module")
def agent(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    root = tmp_path_factory.mktemp("receive")
    with AgentProcess(root / "state", trust=bundles.public_key) as running_agent:  # defaults
        with running_agent.client() as client:
            assert client.deploy(bundles.mlp[1]).ok
        yield running_agent


def _burst(target: str, data: bytes, callers: int) -> list[grpc.StatusCode]:
    """``callers`` calls of ``data`` at once, each on its own connection; their status codes."""
    codes: list[grpc.StatusCode] = []
    lock = threading.Lock()
    go = threading.Barrier(callers)

    def call() -> None:
        with grpc.insecure_channel(target, options=[
                ("grpc.max_send_message_length", 64 << 20)]) as channel:
            stub = channel.unary_unary(INFER)
            go.wait()
            try:
                stub(data, timeout=300)
                code = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                code = exc.code()
            with lock:
                codes.append(code)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return codes


def test_many_large_requests_at_once_stay_within_the_receive_budget(
        agent: AgentProcess) -> None:
    assert agent.proc is not None
    data = int64_request("mlp", "input", MESSAGE_MIB << 20, FEATURES)  # refused unparsed
    codes: list[grpc.StatusCode] = []
    growth = peak_growth_mib(agent.proc.pid,
                             lambda: codes.extend(_burst(agent.grpc, data, CALLERS)))
    assert codes == [grpc.StatusCode.RESOURCE_EXHAUSTED] * CALLERS, codes
    assert growth < GROWTH_BOUND_MIB, \
        f"{CALLERS} x {MESSAGE_MIB} MiB at once: the agent's RSS peaked {growth:.0f} MiB higher"
    # and a legitimate request is served after the burst
    with grpc.insecure_channel(agent.grpc) as channel:
        reply = channel.unary_unary(
            INFER, request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString)(
                infer_request("mlp", X[:2]), timeout=60)
    assert reply.model_name == "mlp"


# -- the accounting itself -------------------------------------------------------------------

def _on_thread(fn: object) -> None:
    thread = threading.Thread(target=fn)  # type: ignore[arg-type]
    thread.start()
    thread.join(60)


def test_messages_are_charged_before_parsing_and_held_until_the_call_ends() -> None:
    data = infer_request("mlp", X[:1]).SerializeToString()  # small: not charged
    received = ReceiveBudget(3 << 20)
    decode = budgeted_deserializer(pb.ModelInferRequest.FromString, TypedBudget(), "M",
                                   received)
    assert isinstance(decode(data), pb.ModelInferRequest) and received.used == 0
    big = pb.ModelInferRequest(model_name="mlp", raw_input_contents=[bytes(2 << 20)])
    wire = big.SerializeToString()
    first = decode(wire)
    assert isinstance(first, Received) and received.used == len(wire)
    refused = decode(wire)  # a second 2 MiB message: beyond the 3 MiB held at once
    assert isinstance(refused, OverBudget) and received.used == len(wire)
    error = refused.error()
    assert isinstance(error, QueueFullError)
    assert KEY in str(error) and "not parsed" in str(error)
    assert refused.refusal.__traceback__ is None  # keeps no frame (and so no message) alive

    def handle() -> None:  # the handler's thread: claims, then its call ends
        assert claimed(first).model_name == "mlp"
        assert received.used == len(wire)
        received.release_held()

    _on_thread(handle)
    assert received.used == 0
    dropped = decode(wire)
    assert received.used == len(wire)
    del dropped  # its call was cancelled before a handler claimed it
    gc.collect()
    assert received.used == 0


def test_the_receive_budget_setting_is_read_and_checked(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[grpc]\nmax_receive_bytes_in_flight = 134217728\n")
    assert load_config(config, state_dir=tmp_path).grpc.max_receive_bytes_in_flight == 1 << 27
    config.write_text("[grpc]\nmax_receive_bytes_in_flight = 1048576\n")
    with pytest.raises(ConfigError, match=r"grpc\.max_receive_bytes_in_flight.*max_message_bytes"):
        load_config(config, state_dir=tmp_path)
