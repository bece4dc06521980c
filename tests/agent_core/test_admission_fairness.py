"""Unary admission under a caller that keeps every slot busy (issue 27's soak).

Before: the agent admitted ``workers x 4`` calls whoever sent them, so one connection that kept
that many calls open (the soak's give-up attacker: bursts of calls with a 1 ms deadline) made
every other caller's call RESOURCE_EXHAUSTED. Now slots are shared between connections, a
connection with no call in flight always gets one, and a call whose deadline leaves less than
the floor (or the recent time to serve a call) is answered DEADLINE_EXCEEDED without a slot.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from edge_agent.config import load_config
from edge_agent.core.dataplane import DataPlane
from edge_agent.frontends.grpc.admission import AdmissionPool
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.server import AgentServer
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install
from tests.support.eventually import eventually
from tests.support.spin_model import spin_input
from tests.support.traffic import infer_request

SLOW_TRIPS = 300_000  # a run of a fraction of a second to seconds, whatever the machine's load


@pytest.fixture
def served(bundles: Bundles, tmp_path: Path) -> Iterator[tuple[str, AdmissionPool]]:
    """An agent serving ``spin`` with 2 handler threads (8 slots) and a 500 ms deadline floor."""
    install(bundles.spin, tmp_path)
    config = load_config(state_dir=tmp_path, grpc_address="127.0.0.1:0", no_uds=True)
    config = dataclasses.replace(config, grpc=dataclasses.replace(
        config.grpc, workers=2, deadline_floor_ms=500))
    dataplane = DataPlane(tmp_path)
    server = AgentServer(dataplane, config)
    try:
        address = server.start().tcp
        assert address is not None
        server.mark_serving()
        pool = server._pools[0]
        assert isinstance(pool, AdmissionPool)
        yield address, pool
    finally:
        server.stop(grace=1.0)
        dataplane.close()


def _connection(address: str) -> grpc.Channel:
    """A channel on a connection of its own (grpcio shares one between a process's channels)."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def _infer(stub: pb_grpc.GRPCInferenceServiceStub, trips: int, timeout: float | None) -> str:
    try:
        stub.ModelInfer(infer_request("spin", spin_input(trips)), timeout=timeout)
    except grpc.RpcError as exc:
        return f"{exc.code().name} {exc.details()}"
    return "ok"


def _admitted(pool: AdmissionPool, n: int) -> None:
    eventually(lambda: pool.admitted == n, timeout=60, interval=0.01,
               message=lambda: f"{pool.admitted} admitted, not {n}")


def test_a_connection_that_fills_the_slots_leaves_one_for_another_connection(
        served: tuple[str, AdmissionPool]) -> None:
    address, pool = served
    hog, other = _connection(address), _connection(address)
    outcomes: list[str] = []
    lock = threading.Lock()

    def hold() -> None:
        outcome = _infer(pb_grpc.GRPCInferenceServiceStub(hog), SLOW_TRIPS, 120)
        with lock:
            outcomes.append(outcome)

    holders = [threading.Thread(target=hold) for _ in range(pool.limit + 4)]
    try:
        for t in holders:
            t.start()
        # alone, the hog may take every slot; its calls beyond them are refused
        eventually(lambda: len(outcomes) >= 4 and pool.admitted == pool.limit, timeout=60,
                   interval=0.01, message=lambda: f"{pool.admitted} admitted, {outcomes}")
        assert all(o.startswith("RESOURCE_EXHAUSTED") for o in outcomes), outcomes
        # another connection still gets a call in (before: RESOURCE_EXHAUSTED at once)
        answer = _infer(pb_grpc.GRPCInferenceServiceStub(other), 0, 120)
        assert answer == "ok", answer
    finally:
        for t in holders:
            t.join(120)
        hog.close()
        other.close()
    assert outcomes.count("ok") == pool.limit, outcomes


def test_connections_share_the_slots(served: tuple[str, AdmissionPool]) -> None:
    address, pool = served
    first, second = _connection(address), _connection(address)
    outcomes: dict[str, list[str]] = {"first": [], "second": []}
    lock = threading.Lock()

    def hold(name: str, channel: grpc.Channel) -> None:
        outcome = _infer(pb_grpc.GRPCInferenceServiceStub(channel), SLOW_TRIPS, 120)
        with lock:
            outcomes[name].append(outcome)

    leads = [threading.Thread(target=hold, args=("first", first)),
             threading.Thread(target=hold, args=("second", second))]
    rest = [threading.Thread(target=hold, args=(name, channel))
            for name, channel in (("second", second), ("first", first)) for _ in range(6)]
    try:
        for n, lead in enumerate(leads, 1):  # both connections hold a call
            lead.start()
            _admitted(pool, n)
        for t in rest:
            t.start()
        # two connections: each holds at most half of the 8 slots
        eventually(lambda: sum(map(len, outcomes.values())) >= 5, timeout=60, interval=0.01,
                   message=lambda: str(outcomes))
        refused = [o for os_ in outcomes.values() for o in os_ if o != "ok"]
        assert refused and all(o.startswith("RESOURCE_EXHAUSTED") for o in refused), outcomes
    finally:
        for t in (*leads, *rest):
            t.join(120)
        first.close()
        second.close()
    assert outcomes["first"].count("ok") >= 1 and outcomes["second"].count("ok") >= 1, outcomes
    assert outcomes["first"].count("ok") <= pool.limit // 2, outcomes


def test_a_call_whose_deadline_is_below_the_floor_is_shed_without_a_slot(
        served: tuple[str, AdmissionPool]) -> None:
    address, pool = served
    with _connection(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        late = _infer(stub, 0, 0.2)  # 200 ms left: below the 500 ms floor
        assert late.startswith("DEADLINE_EXCEEDED") and "deadline_floor_ms" in late, late
        assert pool.shed >= 1 and pool.admitted == 0  # answered at once, no slot taken
        assert _infer(stub, 0, 30) == "ok"
        assert _infer(stub, 0, None) == "ok"  # no deadline at all
