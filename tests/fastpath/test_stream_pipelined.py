"""ModelStreamInfer carries many requests in flight on one stream from one client: answers
come as requests finish (matched by id), on a real served agent over its Unix socket."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from edge_agent.config import load_config
from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.server import AgentServer
from tests.fastpath.conftest import ORT, MlpBundles
from tests.support.core_bundles import build, install, reference_outputs
from tests.support.spin_model import make_spin_model, spin_input

IN_FLIGHT = 16


def _request(model: str, x: np.ndarray, rid: str) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name=model, id=rid)
    msg.inputs.add(name="input", datatype="FP32", shape=x.shape)
    msg.raw_input_contents.append(x.tobytes())
    return msg


@pytest.fixture(scope="module")
def uds(tmp_path_factory: pytest.TempPathFactory, mlp_bundles: MlpBundles) -> Iterator[Path]:
    """mlp v1 and a spin model (its runs time out after 10 s) on one agent."""
    root = tmp_path_factory.mktemp("stream")
    state = root / "state"
    install(mlp_bundles.v1, state)
    install(build(make_spin_model(root / "spin.onnx"), root / "out", "spin", 1, profile=ORT),
            state)
    config = load_config(None, state_dir=state, grpc_address="127.0.0.1:0",
                         uds=root / "infer.sock")
    dataplane = DataPlane(state, overrides={"spin": ModelOverrides(execution_timeout_ms=10_000)},
                          drain_timeout_s=2.0)
    server = AgentServer(dataplane, config)
    try:
        addresses = server.start()
        server.mark_serving()
        assert addresses.uds is not None
        yield addresses.uds
    finally:
        server.stop(2.0)
        dataplane.close()


def test_sixteen_in_flight_on_one_stream_each_answered_by_id(uds: Path,
                                                            mlp_bundles: MlpBundles) -> None:
    """The client sends request k + 16 only when an answer came back: the server must answer
    while the stream stays open (a server answering at half-close would never get there)."""
    rng = np.random.default_rng(12)
    inputs = {f"q{i}": rng.random((1 + i % 3, 64), dtype=np.float32) for i in range(200)}
    slots = threading.Semaphore(IN_FLIGHT)
    in_flight_max = 0
    outstanding = 0
    lock = threading.Lock()

    def requests() -> Iterator[pb.ModelInferRequest]:
        nonlocal outstanding, in_flight_max
        for rid, x in inputs.items():
            assert slots.acquire(timeout=60), "no answer while 16 requests were in flight"
            with lock:
                outstanding += 1
                in_flight_max = max(in_flight_max, outstanding)
            yield _request("mlp", x, rid)

    got: dict[str, np.ndarray] = {}
    with grpc.insecure_channel(f"unix:{uds}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for answer in stub.ModelStreamInfer(requests(), timeout=120):
            assert answer.error_message == ""
            response = answer.infer_response
            got[response.id] = np.frombuffer(response.raw_output_contents[0],
                                              np.float32).reshape(-1, 10)
            with lock:
                outstanding -= 1
            slots.release()
    assert set(got) == set(inputs)
    assert in_flight_max > 1  # pipelined: more than one request was in flight at once
    for rid, x in inputs.items():
        want = reference_outputs(mlp_bundles.v1_onnx, {"input": x})["probs"]
        np.testing.assert_allclose(got[rid], want, atol=1e-5)


def test_a_slow_request_does_not_hold_back_the_answers_after_it(uds: Path) -> None:
    """A spin run (until its 10 s execution timeout) first, then MLP requests: the MLP answers
    come while the spin still runs, and the spin's answer (a timeout) comes last."""
    fast = {f"fast{i}": np.full((1, 64), i / 10, np.float32) for i in range(8)}
    all_fast = threading.Event()
    order: list[str] = []
    errors: dict[str, str] = {}

    def requests() -> Iterator[pb.ModelInferRequest]:
        yield _request("spin", spin_input(10**9), "slow")
        for rid, x in fast.items():
            yield _request("mlp", x, rid)
        all_fast.wait(120)  # keep the stream open until the fast answers are in

    answers: queue.SimpleQueue[pb.ModelStreamInferResponse] = queue.SimpleQueue()
    with grpc.insecure_channel(f"unix:{uds}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for answer in stub.ModelStreamInfer(requests(), timeout=120):
            answers.put(answer)
            rid = answer.infer_response.id
            order.append(rid)
            if answer.error_message:
                errors[rid] = answer.error_message
            if set(fast) <= set(order):
                all_fast.set()
    assert sorted(order) == sorted([*fast, "slow"])
    assert order[-1] == "slow", order
    assert set(errors) == {"slow"} and "execution timeout" in errors["slow"]
