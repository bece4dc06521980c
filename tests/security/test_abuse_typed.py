"""Typed contents that cost the agent many times their size (issue 27): a 57 MiB
``int64_contents`` request to an FP32 model took +1,430 MiB before it was refused, BYTES as much.

Now the deserializer charges what a request's typed contents will take to one budget
(``[agent] max_typed_input_mib``) before parsing them, the declared datatype and shape are
checked against the model before conversion, and HTTP JSON data is charged and checked alike.
The memory figures are the agent subprocess's own (/proc/PID/status), with generous bounds.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from benchmarks.attacks.typed_contents import bytes_request, int64_request
from edge_agent.client.agent_client import AgentClient
from edge_agent.config import AgentConfig, GrpcConfig, HttpConfig, ModelsConfig, load_config
from edge_agent.errors import ConfigError, InvalidInputError, QueueFullError
from edge_agent.frontends.common.typed_budget import KEY, OverBudget, TypedBudget
from edge_agent.frontends.common.undecodable import RefusedUnread
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.handlers import budgeted_deserializer
from edge_agent.frontends.grpc.received import Received
from edge_agent.frontends.grpc.typed_cost import WORST_PER_BYTE, TooManyTensors, typed_cost
from tests.security.abuse import peak_growth_mib
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess, InProcessAgent, running, sections
from tests.support.traffic import X, infer_request

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
FEATURES = 64  # the test MLP: input FP32 [batch, 64]
BUDGET_MIB = 64
GROWTH_BOUND_MIB = 256  # receiving 32 MiB costs about twice that; parsing it cost ~800 MiB


@pytest.fixture(scope="module")
def agent(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    root = tmp_path_factory.mktemp("typed")
    config = root / "agent.toml"
    config.write_text(f"[agent]\nmax_typed_input_mib = {BUDGET_MIB}\n")
    with AgentProcess(root / "state", trust=bundles.public_key,
                      extra=["--no-mdns", "--config", str(config)]) as running_agent:
        with running_agent.client() as client:
            assert client.deploy(bundles.mlp[1]).ok
        yield running_agent


def _call(target: str, data: bytes) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(target, options=[
            ("grpc.max_send_message_length", 64 << 20)]) as channel:
        try:
            reply = channel.unary_unary(INFER)(data, timeout=120)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, pb.ModelInferResponse.FromString(reply).model_name


AMPLIFIERS: dict[str, Callable[[], bytes]] = {
    "int64": lambda: int64_request("mlp", "input", 32 << 20, FEATURES),  # 32 MiB, 1 B a value
    "bytes": lambda: bytes_request("mlp", "input", (24 << 20) // 4),  # 24 MiB, 2 B a string
}


@pytest.mark.parametrize("kind", AMPLIFIERS)
def test_amplifying_typed_contents_are_refused_before_they_are_parsed(
        agent: AgentProcess, kind: str) -> None:
    assert agent.proc is not None
    data = AMPLIFIERS[kind]()
    answers: list[tuple[grpc.StatusCode, str]] = []
    growth = peak_growth_mib(agent.proc.pid, lambda: answers.append(_call(agent.grpc, data)))
    code, details = answers[0]
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
    assert KEY in details and "raw_input_contents" in details
    assert growth < GROWTH_BOUND_MIB, f"{kind}: the agent's RSS peaked {growth:.0f} MiB higher"


def test_typed_contents_of_the_wrong_datatype_are_refused_by_their_declaration(
        agent: AgentProcess) -> None:
    code, details = _call(agent.grpc, int64_request("mlp", "input", 1 << 18, FEATURES))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "declared INT64 but the model expects FP32" in details
    code, details = _call(agent.grpc, bytes_request("mlp", "input", 1 << 16))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "declared BYTES but the model expects FP32" in details
    wrong_shape = pb.ModelInferRequest(model_name="mlp")
    wrong_shape.inputs.add(name="input", datatype="FP32", shape=[1, 8]).contents \
        .fp32_contents.extend([0.0] * 8)
    code, details = _call(agent.grpc, wrong_shape.SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "declared with shape [1, 8] but the model expects [-1, 64]" in details


def test_typed_fp32_contents_are_answered_as_raw_ones_are(agent: AgentProcess) -> None:
    x = X[:2]
    typed = pb.ModelInferRequest(model_name="mlp")
    typed.inputs.add(name="input", datatype="FP32", shape=x.shape).contents \
        .fp32_contents.extend(x.ravel().tolist())
    with grpc.insecure_channel(agent.grpc) as channel:
        infer = channel.unary_unary(
            INFER, request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString)
        want = infer(infer_request("mlp", x), timeout=60).raw_output_contents[0]
        for _ in range(3):  # each call gives its charge back
            assert infer(typed, timeout=60).raw_output_contents[0] == want


def test_a_stream_gets_the_refusal_and_goes_on(agent: AgentProcess) -> None:
    messages = [int64_request("mlp", "input", 32 << 20, FEATURES),
                infer_request("mlp", X[:1]).SerializeToString()]
    with grpc.insecure_channel(agent.grpc, options=[
            ("grpc.max_send_message_length", 64 << 20)]) as channel:
        replies = [pb.ModelStreamInferResponse.FromString(r)
                   for r in channel.stream_stream(STREAM)(iter(messages), timeout=120)]
    assert len(replies) == 2
    assert sum(KEY in r.error_message for r in replies) == 1
    assert sum(r.infer_response.model_name == "mlp" and not r.error_message
               for r in replies) == 1


# -- the budget itself -----------------------------------------------------------------------

def _on_thread(fn: Callable[[], object]) -> object:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(60)
    return out[0]


def test_the_budget_refuses_beyond_what_is_in_flight_and_takes_it_back() -> None:
    data = int64_request("m", "input", 1 << 20, 16)  # ~25 MiB parsed and converted
    cost = typed_cost(data)
    budget = TypedBudget(cost + cost // 2)
    decode = budgeted_deserializer(pb.ModelInferRequest.FromString, budget, "ModelInferRequest")
    first = decode(data)  # reserved on the deserializer's thread (grpc's polling thread)
    assert isinstance(first, Received) and budget.used == cost
    second = decode(data)  # another call, while the first is in flight
    assert isinstance(second, OverBudget)
    error = second.refused("ModelInfer", "peer")
    assert isinstance(error, QueueFullError)
    assert KEY in str(error) and "retry shortly" in str(error)
    # the handler's thread takes the charge up, and gives it back when its call ends
    assert isinstance(_on_thread(lambda: (first.claim(), budget.release_held())[0]),
                      pb.ModelInferRequest)
    assert budget.used == 0
    third = decode(data)
    assert budget.used == cost
    del third  # a call cancelled before its handler ran: its charge comes back all the same
    assert budget.used == 0
    with pytest.raises(QueueFullError, match="more than the agent's"):
        TypedBudget(cost // 2).charge(cost, "the request")


def test_what_typed_contents_are_charged() -> None:
    values = 1 << 20
    assert typed_cost(int64_request("m", "input", values, 16)) >= values * 16  # parsed alone
    elements = 1 << 16
    assert typed_cost(bytes_request("m", "input", elements)) >= elements * (32 + 56)
    raw = infer_request("m", np.zeros((4096, 64), np.float32)).SerializeToString()
    assert len(raw) > 1 << 20 and typed_cost(raw) == 0  # raw contents cost their size
    assert typed_cost(int64_request("m", "input", 1024, 16)) == 0  # small: not charged
    broken = int64_request("m", "input", values, 16)[:-7]  # its framing runs past the end
    assert typed_cost(broken) == len(broken) * WORST_PER_BYTE


def test_a_long_list_of_outputs_stops_the_walk_and_is_refused_unparsed() -> None:
    request = infer_request("m", np.zeros((1, 16), np.float32))
    for _ in range(20_000):  # the soak's amplifier: one name 20,000 times (~180 KB)
        request.outputs.add(name="probs")
    data = request.SerializeToString()
    with pytest.raises(TooManyTensors) as many:
        typed_cost(data)
    assert "more than 1024 outputs" in str(many.value.refusal())
    decode = budgeted_deserializer(pb.ModelInferRequest.FromString, TypedBudget(1 << 30),
                                   "ModelInferRequest")
    refused = decode(data)
    assert isinstance(refused, RefusedUnread)
    assert isinstance(refused.error(), InvalidInputError)
    assert "at most 1024 are accepted" in str(refused.error())


def test_the_budget_setting_is_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    assert load_config(None, state_dir=tmp_path).models.typed_input_bytes == 256 << 20
    path.write_text("[agent]\nmax_typed_input_mib = 32\n")
    assert load_config(path, state_dir=tmp_path).models.typed_input_bytes == 32 << 20
    path.write_text("[agent]\nmax_typed_input_mib = 0\n")
    with pytest.raises(ConfigError, match=r"agent\.max_typed_input_mib"):
        load_config(path, state_dir=tmp_path)


# -- HTTP JSON data ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def http_agent(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[InProcessAgent]:
    config = AgentConfig(state_dir=tmp_path_factory.mktemp("typed-http") / "state",
                         grpc=GrpcConfig(address="127.0.0.1:0", uds_enabled=False),
                         http=HttpConfig(listen="127.0.0.1:0"),
                         models=ModelsConfig(typed_input_bytes=16 << 10))
    with running(config, sections("typed-http", bundles.public_key, insecure=True)) as agent:
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[1]).ok
        yield agent


def _post(agent: InProcessAgent, doc: dict[str, object]) -> tuple[int, str]:
    host, port = agent.http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", "/v2/models/mlp/infer", json.dumps(doc))
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def _json_input(datatype: str, rows: int, value: object) -> dict[str, object]:
    return {"inputs": [{"name": "input", "datatype": datatype, "shape": [rows, FEATURES],
                        "data": [value] * (rows * FEATURES)}]}


def test_json_data_is_checked_against_the_model_and_charged(http_agent: InProcessAgent) -> None:
    status, body = _post(http_agent, _json_input("INT64", 1, 0))
    assert status == 400 and "declared INT64 but the model expects FP32" in body
    status, body = _post(http_agent, _json_input("BYTES", 1, "a"))
    assert status == 400 and "declared BYTES but the model expects FP32" in body
    status, body = _post(http_agent, _json_input("FP32", 1, 0.5))  # 64 values: within
    assert status == 200, body
    status, body = _post(http_agent, _json_input("FP32", 32, 0.5))  # 2,048: 24 KiB > 16 KiB
    assert status == 429 and KEY in body
    status, body = _post(http_agent, _json_input("FP32", 1, 0.5))  # every charge came back
    assert status == 200, body
