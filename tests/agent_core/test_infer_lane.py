"""ModelInfer from a completion queue of its own (``[grpc] infer_lane``, issue 29).

The lane (the default, "queue") and grpcio's handler threads ("threads") must answer alike:
the same results, the same errors, the same protections; and the lane must never stall on one
call (a slow model's request runs on a handler thread; a call waiting for a receive slot waits
in a queue, not on the lane's thread).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil
import pytest

from edge_agent import grpc_internals
from edge_agent.config import load_config
from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.frontends.grpc import infer_lane
from edge_agent.frontends.grpc.admission import AdmissionPool
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.server import AgentServer
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install, reference_outputs
from tests.support.eventually import eventually
from tests.support.spin_model import spin_input
from tests.support.traffic import X, infer_request, served_version

INFER = "/inference.GRPCInferenceService/ModelInfer"
SLOW_TRIPS = 1_000_000  # a run of a second or more, whatever the machine's load
LANES = ("queue", "threads")
IDLE_S = 3.0


@contextlib.contextmanager
def _serve(bundles: Bundles, tmp_path: Path, lane: str,
           **grpc_keys: Any) -> Iterator[tuple[str, AgentServer]]:
    """An agent serving ``mlp`` (v1, in the agent's process: microseconds a run) and
    ``spin`` with ModelInfer on ``lane``."""
    install(bundles.mlp_v1, tmp_path)
    install(bundles.spin, tmp_path)
    config = load_config(state_dir=tmp_path, grpc_address="127.0.0.1:0", no_uds=True)
    config = dataclasses.replace(config, grpc=dataclasses.replace(
        config.grpc, infer_lane=lane, **grpc_keys))
    dataplane = DataPlane(tmp_path, overrides={"mlp": ModelOverrides(isolation="thread")})
    server = AgentServer(dataplane, config)
    try:
        address = server.start().tcp
        assert address is not None
        server.mark_serving()
        yield address, server
    finally:
        server.stop(grace=1.0)
        dataplane.close()


def _pool(server: AgentServer) -> AdmissionPool:
    pool = server._pools[0]
    assert isinstance(pool, AdmissionPool)
    return pool


def _lane_cpu_s(lane: infer_lane.InferLane) -> float:
    """The CPU time the lane's thread has used so far."""
    thread = lane._thread
    assert thread is not None
    times = {t.id: t.user_time + t.system_time for t in psutil.Process().threads()}
    return times[thread.native_id]


def _outcome(call: Any) -> str:
    try:
        call()
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    return "OK"


def test_the_lane_serves_model_infer_and_leaves_the_rest_to_the_handler_threads(
        bundles: Bundles, tmp_path: Path) -> None:
    with _serve(bundles, tmp_path, "queue") as (address, server):
        lane = server._lane
        assert lane is not None
        expected = reference_outputs(bundles.mlp_v1_onnx, {"input": X})["probs"]
        calls = 0

        def served_here() -> bool:  # the tiny MLP, once measured, runs on the lane's thread
            nonlocal calls
            version, probs = served_version(address)
            calls += 1
            assert version == "1"
            np.testing.assert_allclose(probs, expected, rtol=1e-4, atol=1e-5)
            return lane.served_here > 0

        # its fastest run so far must be under 250 us: a loaded machine may take a while
        eventually(served_here, timeout=120, interval=0.0,
                   message="no MLP request ran on the lane's thread")
        assert lane.served_here + lane.handed_off == calls
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"), timeout=30)
            assert meta.inputs[0].name == "input"
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live
        eventually(lambda: _pool(server).admitted == 0, timeout=30,
                   message="the lane's calls gave their slots back")


@pytest.mark.parametrize("lane", LANES)
def test_bad_requests_are_answered_alike_on_both_lanes(bundles: Bundles, tmp_path: Path,
                                                       lane: str) -> None:
    with _serve(bundles, tmp_path, lane) as (address, _server), \
            grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        wrong_shape = infer_request("mlp", np.zeros((1, 63), np.float32))
        unknown = infer_request("nope", X)
        raw = channel.unary_unary(INFER, request_serializer=None, response_deserializer=None)
        seen = {
            "shape": _outcome(lambda: stub.ModelInfer(wrong_shape, timeout=30)),
            "unknown": _outcome(lambda: stub.ModelInfer(unknown, timeout=30)),
            "garbage": _outcome(lambda: raw(b"\xff\xff\xff", timeout=30)),
        }
    assert seen["shape"].startswith("INVALID_ARGUMENT: ") and "63" in seen["shape"]
    assert seen["unknown"].startswith("NOT_FOUND: ") and "nope" in seen["unknown"]
    assert seen["garbage"].startswith("INVALID_ARGUMENT: ")


def test_both_lanes_give_the_same_answers_to_the_same_bad_requests(bundles: Bundles,
                                                                   tmp_path: Path) -> None:
    answers = []
    for lane in LANES:
        with _serve(bundles, tmp_path / lane, lane) as (address, _server), \
                grpc.insecure_channel(address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            answers.append([
                _outcome(lambda r=r, s=stub: s.ModelInfer(r, timeout=30)) for r in (
                    infer_request("mlp", np.zeros((1, 63), np.float32)),
                    infer_request("nope", X),
                    pb.ModelInferRequest(model_name="mlp", model_version="x"),
                    infer_request("mlp", X),
                )])
    assert answers[0] == answers[1]
    assert answers[0][3] == "OK"


@pytest.mark.parametrize("lane", LANES)
def test_a_call_whose_request_never_comes_is_cancelled_and_gives_its_slot_back(
        bundles: Bundles, tmp_path: Path, lane: str) -> None:
    release = threading.Event()

    def never() -> Iterator[bytes]:
        release.wait(60)
        yield from ()

    with _serve(bundles, tmp_path, lane, request_arrival_s=1.0) as (address, server), \
            grpc.insecure_channel(address) as channel:
        silent = channel.stream_unary(INFER, request_serializer=None,
                                      response_deserializer=None).future(never(), timeout=60)
        try:
            with pytest.raises(grpc.RpcError) as ended:
                silent.result(timeout=60)
            assert ended.value.code() == grpc.StatusCode.CANCELLED
        finally:
            release.set()
        eventually(lambda: _pool(server).admitted == 0, timeout=30,
                   message="the silent call's slot came back")
        assert _pool(server).deadline.cancelled == 1


@pytest.mark.parametrize("lane", LANES)
def test_a_call_that_closes_without_its_request_is_unimplemented(
        bundles: Bundles, tmp_path: Path, lane: str) -> None:
    with _serve(bundles, tmp_path, lane) as (address, server), \
            grpc.insecure_channel(address) as channel:
        call = channel.stream_unary(INFER, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as ended:
            call(iter(()), timeout=30)
        assert ended.value.code() == grpc.StatusCode.UNIMPLEMENTED
        eventually(lambda: _pool(server).admitted == 0, timeout=30,
                   message="the empty call's slot came back")


def test_a_call_waiting_for_a_receive_slot_does_not_hold_up_the_lane(
        bundles: Bundles, tmp_path: Path) -> None:
    """One receive slot (max_receive_bytes_in_flight = max_message_bytes), held by a call
    that sends nothing: a second ModelInfer waits for the slot in the lane's queue while the
    lane keeps answering, and is served once the slot is free."""
    release = threading.Event()

    def later() -> Iterator[bytes]:
        release.wait(60)
        yield from ()

    size = 1 << 20
    with _serve(bundles, tmp_path, "queue", max_message_bytes=size,
                max_receive_bytes_in_flight=size) as (address, server), \
            grpc.insecure_channel(address) as channel:
        holder = channel.stream_unary(INFER, request_serializer=None,
                                      response_deserializer=None).future(later(), timeout=60)
        eventually(lambda: _pool(server).admitted == 1, timeout=30,
                   message="the holding call was admitted")
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        waiting = stub.ModelInfer.future(infer_request("mlp", X[:1]), timeout=60)
        eventually(lambda: _pool(server).admitted == 2, timeout=30,
                   message="the second call was admitted")
        assert not waiting.done()  # its message is not read while the slot is held
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"), timeout=30)
        assert meta.name == "mlp"
        release.set()  # the holder closes without a message: its slot comes free
        with pytest.raises(grpc.RpcError):
            holder.result(timeout=60)
        reply = waiting.result(timeout=60)
        assert np.frombuffer(reply.raw_output_contents[0], np.float32).shape == (10,)


def test_a_slow_model_runs_on_a_handler_thread_while_the_lane_answers_others(
        bundles: Bundles, tmp_path: Path) -> None:
    with _serve(bundles, tmp_path, "queue") as (address, server), \
            grpc.insecure_channel(address) as channel:
        lane = server._lane
        assert lane is not None
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        slow = stub.ModelInfer.future(infer_request("spin", spin_input(SLOW_TRIPS)), timeout=120)
        eventually(lambda: lane.handed_off >= 1, timeout=30,
                   message="the slow request went to a handler thread")
        reply = stub.ModelInfer(infer_request("mlp", X[:1]), timeout=60)
        assert reply.model_name == "mlp"
        assert not slow.done()  # answered while the slow one still ran
        assert slow.result(timeout=120).model_name == "spin"


def test_a_grpcio_without_the_queue_leaves_model_infer_on_the_handler_threads(
        caplog: pytest.LogCaptureFixture) -> None:
    no_core: Any = types.SimpleNamespace()  # a server object without grpc core's server
    assert grpc_internals.attach_queue(no_core, infer_lane.METHOD) is None
    assert "served on the handler threads" in caplog.text


def test_a_large_message_is_charged_on_arrival_and_run_on_a_handler_thread(
        bundles: Bundles, tmp_path: Path) -> None:
    """A message of 64 KiB or more is parsed (and charged to the receive budget) by the lane
    as it arrives, whatever its model, then runs on a handler thread: the lane stays free for
    small calls, and received messages cannot wait uncharged behind busy handler threads."""
    with _serve(bundles, tmp_path, "queue") as (address, server), \
            grpc.insecure_channel(address) as channel:
        lane = server._lane
        assert lane is not None
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        big = infer_request("mlp", np.ones((256, 64), np.float32))  # 64 KiB of raw contents
        assert big.ByteSize() >= 64 * 1024
        before = (lane.served_here, lane.handed_off)
        with pytest.raises(grpc.RpcError) as refused:  # checked on the handler thread: 8 rows
            stub.ModelInfer(big, timeout=60)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "256 rows but max_batch_size is 8" in (refused.value.details() or "")
        assert (lane.served_here, lane.handed_off) == (before[0], before[1] + 1)


def test_calls_ready_together_run_together_each_answered_as_alone(
        bundles: Bundles, tmp_path: Path) -> None:
    """Many callers at once: the quick calls ready together run as one execution (up to the
    MLP's max_batch_size, 8), and each caller still gets its own rows' answer, or its own
    error when its request is bad."""
    callers = 12
    inputs = [np.random.default_rng(seed).standard_normal((1 + seed % 3, 64)).astype(np.float32)
              for seed in range(callers)]
    expected = [reference_outputs(bundles.mlp_v1_onnx, {"input": x})["probs"] for x in inputs]
    bad = infer_request("mlp", np.zeros((1, 63), np.float32))
    wrong: list[str] = []
    stop = threading.Event()
    with _serve(bundles, tmp_path, "queue") as (address, server), \
            grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        alone = _outcome(lambda: stub.ModelInfer(bad, timeout=30))
        assert alone.startswith("INVALID_ARGUMENT: ")

        def call(i: int) -> None:
            with grpc.insecure_channel(address) as own:
                caller = pb_grpc.GRPCInferenceServiceStub(own)
                while not stop.is_set():
                    if i % 4 == 3:  # some callers send a bad request between good ones
                        seen = _outcome(lambda: caller.ModelInfer(bad, timeout=60))
                        if seen != alone:
                            wrong.append(f"caller {i}: {seen}")
                    try:
                        reply = caller.ModelInfer(infer_request("mlp", inputs[i]), timeout=60)
                    except grpc.RpcError as exc:
                        wrong.append(f"caller {i}: {exc.code().name}: {exc.details()}")
                        continue
                    probs = np.frombuffer(reply.raw_output_contents[0], np.float32)
                    if not np.allclose(probs.reshape(expected[i].shape), expected[i],
                                       rtol=1e-4, atol=1e-5):
                        wrong.append(f"caller {i}: another caller's rows")

        lane = server._lane
        assert lane is not None

        def ran_together() -> bool:
            stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="mlp"), timeout=30)
            batches = stats.model_stats[0].batch_stats
            return lane.run_together > 0 and any(
                b.batch_size > 3 and b.compute_infer.count for b in batches)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(callers)]
        for t in threads:
            t.start()
        try:
            eventually(ran_together, timeout=120, interval=0.2,
                       message="no execution ran the rows of several calls")
        finally:
            stop.set()
            for t in threads:
                t.join(120)
        assert not wrong, wrong[:5]
        stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="mlp"), timeout=30)
        assert max(b.batch_size for b in stats.model_stats[0].batch_stats) <= 8
        # with nothing left to run the lane waits for the next event: it does not poll on
        # (it once did, with half a core, after its first calls run together)
        used = _lane_cpu_s(lane)
        time.sleep(IDLE_S)
        assert _lane_cpu_s(lane) - used < IDLE_S / 10, "the idle lane kept polling"
        eventually(lambda: _pool(server).admitted == 0, timeout=30,
                   message="the lane's calls gave their slots back")


@pytest.mark.parametrize("lane", LANES)
def test_large_messages_while_every_handler_thread_is_busy(bundles: Bundles, tmp_path: Path,
                                                           lane: str) -> None:
    """The one handler thread runs a slow call while two 600 KiB messages arrive, with room
    for one such message in the receive budget. The messages held never pass the budget (the
    lane charges each as it arrives and refuses one past it; a handler thread leaves its
    message with the sender until it is free), every call is answered, and the budget is
    empty once the slow call ends. On the lane, a small call is answered while the slow call
    still runs (workers = 1 admits 4 calls: the slow one, the two large ones, the small one)."""
    budget = 1 << 20
    big = infer_request("mlp", np.ones((2400, 64), np.float32))  # 600 KiB; refused at 8 rows
    assert 512 * 1024 < big.ByteSize() < budget
    peak = 0
    watching = threading.Event()

    with _serve(bundles, tmp_path, lane, workers=1, max_message_bytes=budget,
                max_receive_bytes_in_flight=budget) as (address, server), \
            grpc.insecure_channel(address) as channel:
        received = server.received
        assert received is not None

        def watch() -> None:  # the most bytes of messages held at any moment
            nonlocal peak
            while not watching.is_set():
                peak = max(peak, received.used)
                time.sleep(0.0005)

        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        if server._lane is not None:  # the MLP runs on the lane once measured as quick
            lane_ = server._lane
            eventually(lambda: served_version(address)[0] == "1" and lane_.served_here > 0,
                       timeout=120, interval=0.0, message="no MLP request ran on the lane")
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            slow = stub.ModelInfer.future(infer_request("spin", spin_input(SLOW_TRIPS)),
                                          timeout=120)
            eventually(lambda: _pool(server).admitted == 1, timeout=30,
                       message="the slow call was admitted")
            bigs = [stub.ModelInfer.future(big, timeout=120) for _ in range(2)]
            if lane == "queue":  # the lane answers a small call while the thread is busy
                reply = stub.ModelInfer(infer_request("mlp", X[:1]), timeout=60)
                assert np.frombuffer(reply.raw_output_contents[0], np.float32).shape == (10,)
                assert not slow.done()
            outcomes = [_outcome(lambda call=call: call.result()) for call in bigs]
            assert slow.result().model_name == "spin"
        finally:
            watching.set()
            watcher.join(10)
        assert peak <= budget, f"{peak} bytes of messages held, past the {budget} budget"
        for outcome in outcomes:  # parsed and checked (8 rows at most), or refused unparsed
            assert outcome.startswith(("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED")), outcome
            if outcome.startswith("RESOURCE_EXHAUSTED"):
                assert "max_receive_bytes_in_flight" in outcome
        assert any(o.startswith("INVALID_ARGUMENT") for o in outcomes)
        eventually(lambda: received.used == 0, timeout=30,
                   message="the messages held were given back")
        reply = stub.ModelInfer(infer_request("mlp", X[:1]), timeout=60)
        assert reply.model_name == "mlp"
