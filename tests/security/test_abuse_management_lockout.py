"""Management lockout without a token (issue 27): 1,000 silent TCP connections from one address
(127.0.0.2) filled the management port's single global connection cap, and 31 of 34 operator
calls from another address failed. A real in-process agent, TLS on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import grpc
import pytest

from benchmarks.attacks.management_lockout import SilentConnections
from edge_agent.client.agent_client import (
    AgentClient,
    ManagementError,
    ManagementUnreachableError,
    PinnedTls,
)
from edge_agent.config.management import ConnectionLimits
from edge_agent.management.auth import FREE_FAILURES, bearer
from edge_agent.management.gate import ConnectionGate
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from edge_agent.management.tls import fingerprint_of
from tests.security.abuse import limited_agent
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import InProcessAgent, sections, start_agent

OPERATOR_CALLS = 20


def _tls_agent(bundles: Bundles, tmp_path: Path,
               limits: ConnectionLimits | None = None) -> InProcessAgent:
    """A running agent with TLS management on 127.0.0.1 and these connection ``limits``."""
    options = sections("lockout", bundles.public_key)
    if limits is not None:
        options = dataclasses.replace(
            options, management=dataclasses.replace(options.management, limits=limits))
    return start_agent(tmp_path / "state", options, tls=True)


def test_silent_connections_from_one_address_leave_the_operator_served(
        bundles: Bundles, tmp_path: Path) -> None:
    agent = _tls_agent(bundles, tmp_path)
    try:
        token = agent.token
        pin = PinnedTls(fingerprint_of(agent.state_dir))
        with SilentConnections(agent.management, 1000) as hostile:
            eventually(lambda: hostile.opened >= 1000, timeout=60,
                       message=lambda: f"{hostile.opened} hostile connections opened")
            failures: list[str] = []
            for _ in range(OPERATOR_CALLS):  # a fresh connection each, as `edge-console` makes
                try:
                    with AgentClient(agent.management, token=token, tls=pin,
                                     timeout_s=10) as client:
                        assert client.info().agent_id
                except ManagementError as exc:
                    failures.append(str(exc))
            assert failures == [], f"{len(failures)} of {OPERATOR_CALLS} failed: {failures[:3]}"
            assert hostile.held > 0  # the attack was still going on
    finally:
        agent.stop()


def test_a_refused_connection_says_why_and_does_not_blame_insecure(
        bundles: Bundles, tmp_path: Path) -> None:
    """An operator sharing the attacker's address is refused, with the cap named (it was told
    the agent "serves plaintext (started with --insecure?)"). The attacker's connections are
    given a long handshake deadline here, so that they keep their slots for the whole test."""
    agent = _tls_agent(bundles, tmp_path,
                       ConnectionLimits(handshake_timeout_s=300, auth_timeout_s=300))
    try:
        pin = PinnedTls(fingerprint_of(agent.state_dir))
        with SilentConnections(agent.management, 64, source="127.0.0.1") as hostile:
            eventually(lambda: hostile.closed >= 32, timeout=60,
                       message=lambda: f"{hostile.closed} hostile connections refused")
            with pytest.raises(ManagementUnreachableError) as info:
                AgentClient(agent.management, token=agent.token, tls=pin, timeout_s=10)
        message = str(info.value)
        assert "max_unauthenticated_per_peer" in message, message
        assert "plaintext" not in message and "started with --insecure" not in message
        # once the connections are gone, the same address is served again
        with AgentClient(agent.management, token=agent.token, tls=pin) as client:
            assert client.info().agent_id
    finally:
        agent.stop()


def _own_channel(target: str) -> grpc.Channel:
    """A channel with a connection of its own (grpc shares them between channels)."""
    return grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


def test_parallel_wrong_tokens_share_one_slow_line(bundles: Bundles, tmp_path: Path) -> None:
    """Wrong-token calls in parallel from one address were each delayed on their own (1.9 ->
    1,188 guesses/s): their answers now come one slot after the other, a right token on a new
    connection from that address waits its turn too (a short deadline would otherwise tell it
    apart), and an operator connection that had already authenticated is not slowed."""
    with limited_agent(tmp_path / "state", bundles, deploy=False) as agent, \
            _own_channel(agent.management) as operator, \
            _own_channel(agent.management) as guesser, \
            _own_channel(agent.management) as newcomer:
        ops = pb_grpc.AgentManagementStub(operator)
        assert ops.GetInfo(pb.GetInfoRequest(), metadata=bearer(agent.token), timeout=10)
        guess = pb_grpc.AgentManagementStub(guesser).GetInfo
        for i in range(FREE_FAILURES):  # the free ones, answered at once
            with pytest.raises(grpc.RpcError):
                guess(pb.GetInfoRequest(), metadata=bearer(f"guess-{i}"), timeout=30)
        parallel = [guess.future(pb.GetInfoRequest(), metadata=bearer(f"p-{i}"), timeout=60)
                    for i in range(12)]
        eventually(lambda: agent_penalized(agent), timeout=30, message="no call waits")
        # the operator's authenticated connection is not slowed (a generous deadline that the
        # queue above would exceed: its twelve answers are spread over about 9 s)
        assert ops.GetInfo(pb.GetInfoRequest(), metadata=bearer(agent.token), timeout=3)
        right = pb_grpc.AgentManagementStub(newcomer).GetInfo
        with pytest.raises(grpc.RpcError) as info:
            right(pb.GetInfoRequest(), metadata=bearer(agent.token), timeout=0.5)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        details = []
        for f in parallel:
            exc = f.exception(timeout=120)
            assert isinstance(exc, grpc.RpcError) and exc.code() == \
                grpc.StatusCode.UNAUTHENTICATED, exc
            details.append(exc.details() or "")
        found = [re.search(r"answered ([\d.]+) s late", d) for d in details]
        delays = sorted(float(m[1]) for m in found if m is not None)
        assert len(delays) == len(details), details
        assert all(b > a for a, b in itertools.pairwise(delays)), delays
        assert delays[-1] >= 5.0, delays  # one line: each waits for those before it


def agent_penalized(agent: InProcessAgent) -> bool:
    """Whether calls of some address wait for their late answer."""
    assert agent.runtime is not None and agent.runtime.management is not None
    interceptor = agent.runtime.management.server.interceptor
    return interceptor is not None and interceptor.penalty.waiting > 0


def test_a_full_port_makes_room_by_closing_a_stranger(bundles: Bundles, tmp_path: Path) -> None:
    """Silent connections from two addresses fill ``max_connections``; a new connection from a
    third closes the oldest unauthenticated one of the address holding most, so the operator
    is served; its authenticated connection is never the one closed."""
    agent = _tls_agent(bundles, tmp_path, ConnectionLimits(
        max_connections=16, max_connections_per_peer=8, max_unauthenticated_per_peer=8,
        handshake_timeout_s=300, auth_timeout_s=300))
    try:
        pin = PinnedTls(fingerprint_of(agent.state_dir))
        with AgentClient(agent.management, token=agent.token, tls=pin) as operator:
            assert operator.info().agent_id  # authenticated: 1 of the 16
            with SilentConnections(agent.management, 8, source="127.0.0.2") as first, \
                    SilentConnections(agent.management, 8, source="127.0.0.3") as second:
                eventually(lambda: first.closed + second.closed >= 1, timeout=60,
                           message="the port never filled up")
                for _ in range(5):  # each new client makes room for itself
                    with AgentClient(agent.management, token=agent.token, tls=pin,
                                     timeout_s=10) as client:
                        assert client.info().agent_id
                assert operator.info().agent_id  # the first connection was kept
                gate = agent_gate(agent)
                assert gate.stats["evicted"] >= 2, gate.stats  # the fill, then the clients
    finally:
        agent.stop()


def agent_gate(agent: InProcessAgent) -> ConnectionGate:
    """The running agent's management accept loop."""
    assert agent.runtime is not None and agent.runtime.management is not None
    gate = agent.runtime.management.server.gate
    assert gate is not None
    return gate


def test_deadlines_close_strangers_but_not_the_operator(bundles: Bundles, tmp_path: Path) -> None:
    """A connection that never finishes its TLS handshake is closed after handshake_timeout_s;
    one that finishes it but never authenticates, after auth_timeout_s; the operator's
    authenticated connection outlives both deadlines and keeps serving."""
    agent = _tls_agent(bundles, tmp_path,
                       ConnectionLimits(handshake_timeout_s=1, auth_timeout_s=2))
    try:
        pin = PinnedTls(fingerprint_of(agent.state_dir))
        gate = agent_gate(agent)
        with AgentClient(agent.management, token=agent.token, tls=pin) as operator:
            assert operator.info().agent_id
            accepted = gate.stats["accepted"]
            cert = (agent.state_dir / "tls" / "cert.pem").read_bytes()
            stranger = grpc.secure_channel(  # connects (TLS, HTTP/2), never calls
                agent.management, grpc.ssl_channel_credentials(root_certificates=cert),
                options=[("grpc.ssl_target_name_override", "edge-agent"),
                         ("grpc.use_local_subchannel_pool", 1)])
            with SilentConnections(agent.management, 1, reopen_s=60) as silent, stranger:
                grpc.channel_ready_future(stranger).result(timeout=30)
                eventually(lambda: silent.closed >= 1, timeout=60,
                           message="the silent connection was never closed")
                eventually(lambda: gate.stats["authentication timeout"] >= 1, timeout=60,
                           message=lambda: f"the stranger was never closed: {gate.stats}")
            assert gate.stats["handshake timeout"] >= 1, gate.stats
            assert gate.stats["authentication timeout"] >= 1, gate.stats
            assert operator.info().agent_id
            assert gate.stats["accepted"] == accepted + 2  # the operator did not reconnect
    finally:
        agent.stop()
