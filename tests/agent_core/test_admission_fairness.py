"""Unary admission under a caller that keeps every slot busy (issue 27's soak).

Before: the agent admitted ``workers x 4`` calls whoever sent them, so one connection that kept
that many calls open (the soak's give-up attacker: bursts of calls with a 1 ms deadline) made
every other caller's call RESOURCE_EXHAUSTED. Now slots are shared between connections, a
connection with no call in flight always gets one, and a call whose deadline leaves less than
the floor (or the recent time to serve a call) is answered DEADLINE_EXCEEDED without a slot.
"""

from __future__ import annotations

import contextlib
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

INFER = "/inference.GRPCInferenceService/ModelInfer"
SLOW_TRIPS = 1_000_000  # a run of a second or more, whatever the machine's load


@contextlib.contextmanager
def _serve(bundles: Bundles, tmp_path: Path, workers: int) -> Iterator[tuple[str, AdmissionPool]]:
    """An agent serving ``spin`` with ``workers`` handler threads (4 slots each), a 500 ms
    deadline floor and 120 s for a call's request to arrive."""
    install(bundles.spin, tmp_path)
    config = load_config(state_dir=tmp_path, grpc_address="127.0.0.1:0", no_uds=True)
    config = dataclasses.replace(config, grpc=dataclasses.replace(
        config.grpc, workers=workers, deadline_floor_ms=500, request_arrival_s=120))
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


@pytest.fixture
def served(bundles: Bundles, tmp_path: Path) -> Iterator[tuple[str, AdmissionPool]]:
    """An agent with 2 handler threads (8 slots)."""
    with _serve(bundles, tmp_path, 2) as served:
        yield served


@pytest.fixture
def served_wide(bundles: Bundles, tmp_path: Path) -> Iterator[tuple[str, AdmissionPool]]:
    """An agent with the default 8 handler threads (32 slots)."""
    with _serve(bundles, tmp_path, 8) as served:
        yield served


def _connection(address: str) -> grpc.Channel:
    """A channel on a connection of its own (grpcio shares one between a process's channels)."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def _silent(channel: grpc.Channel, n: int, release: threading.Event) -> list[grpc.Future]:
    """``n`` ModelInfer calls on ``channel`` that never send their request, holding their slots
    until ``release`` is set (or the test cancels them)."""
    def never() -> Iterator[bytes]:
        release.wait(120)
        yield from ()

    call = channel.stream_unary(INFER, request_serializer=None, response_deserializer=None)
    return [call.future(never(), timeout=120) for _ in range(n)]


def _infer(stub: pb_grpc.GRPCInferenceServiceStub, trips: int, timeout: float | None) -> str:
    try:
        stub.ModelInfer(infer_request("spin", spin_input(trips)), timeout=timeout)
    except grpc.RpcError as exc:
        return f"{exc.code().name} {exc.details()}"
    return "ok"


def _admitted(pool: AdmissionPool, n: int) -> None:
    eventually(lambda: pool.admitted == n, timeout=60, interval=0.01,
               message=lambda: f"{pool.admitted} admitted, not {n}")


def _refused(futures: list[grpc.Future], n: int) -> list[grpc.RpcError]:
    """The errors of the first ``n`` of ``futures`` to end (waited for)."""
    eventually(lambda: sum(f.done() for f in futures) >= n, timeout=60, interval=0.01,
               message=lambda: f"{sum(f.done() for f in futures)} ended, not {n}")
    return [f.exception() for f in futures if f.done()]


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
    """Calls that never send their request hold their slots (until the test ends them)."""
    address, pool = served
    release = threading.Event()
    channels = {name: _connection(address) for name in ("first", "second")}
    held: dict[str, list[grpc.Future]] = {name: [] for name in channels}

    def open_calls(name: str, n: int) -> list[grpc.Future]:
        new = _silent(channels[name], n, release)
        held[name] += new
        return new

    try:
        open_calls("first", 1)  # both connections hold a call
        _admitted(pool, 1)
        open_calls("second", 1)
        _admitted(pool, 2)
        for i, name in enumerate(("first", "second"), 1):  # 6 more each: its share, 4 of 8
            more = open_calls(name, 6)
            _admitted(pool, 2 + 3 * i)
            refused = _refused(more, 3)
            assert len(refused) == 3, refused
            for exc in refused:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                assert "its share" in exc.details(), exc.details()
        assert pool.admitted == pool.limit
    finally:
        release.set()
        for f in held["first"] + held["second"]:
            f.cancel()
        for ch in channels.values():
            ch.close()


def test_a_flood_of_connections_leaves_each_its_floor(
        served_wide: tuple[str, AdmissionPool]) -> None:
    """Issue 27's soak, round three: attacks held one call each on a dozen and more
    connections, so the legitimate client's share (32 // connections) fell below its 4 calls
    in flight and 146 of its calls were refused. A share is now never below ``limit // 8``."""
    address, pool = served_wide
    assert pool.limit == 32
    release = threading.Event()
    flood = [_connection(address) for _ in range(12)]
    client = _connection(address)
    held: list[grpc.Future] = []
    try:
        for i, channel in enumerate(flood, 1):  # one call each: 13 connections, share 2
            held += _silent(channel, 1, release)
            _admitted(pool, i)
        mine = _silent(client, 4, release)
        held += mine
        _admitted(pool, len(flood) + 4)  # before: 14, two refused beyond the share
        assert not any(f.done() for f in mine), [f.exception() for f in mine if f.done()]
        assert pool.over_share == 0
        (extra,) = _silent(client, 1, release)  # beyond the floor: refused as before
        held.append(extra)
        refused = _refused([extra], 1)
        assert refused[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        assert "its share" in refused[0].details(), refused[0].details()
    finally:
        release.set()
        for f in held:
            f.cancel()
        for ch in [*flood, client]:
            ch.close()


def test_floors_do_not_take_the_headroom(served_wide: tuple[str, AdmissionPool]) -> None:
    """Eight connections holding 4 calls each fill the 32 slots within their shares; a ninth
    gets its equal share (32 // 9 = 3) from the headroom beyond them, but no fourth call up to
    the floor: otherwise ten connections' floors would fill the pool, headroom included."""
    address, pool = served_wide
    release = threading.Event()
    channels = [_connection(address) for _ in range(9)]
    held: list[grpc.Future] = []
    try:
        for i, channel in enumerate(channels):
            calls = _silent(channel, 4, release)
            held += calls
            if i < 8:
                _admitted(pool, 4 * (i + 1))
        _admitted(pool, 35)
        refused = _refused(calls, 1)
        assert len(refused) == 1, refused
        assert refused[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        assert "its share" in refused[0].details(), refused[0].details()
        assert pool.admitted == 35
    finally:
        release.set()
        for f in held:
            f.cancel()
        for ch in channels:
            ch.close()


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
