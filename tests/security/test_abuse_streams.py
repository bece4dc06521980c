"""Idle inference streams must not hold serving capacity (issue 19).

Before the fix each ModelStreamInfer held a handler thread for its whole life: as many idle
streams as handler threads made ModelInfer and the health check time out. Now streams are
non-blocking on a pool of their own, capped in total and per peer, and closed when they stay
silent (first message) or idle; unary calls and health keep their own capacity."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from tests.security.abuse import IdleStreams, limited_agent
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.traffic import X, infer_request


def _serves(target: str, bundles: Bundles) -> None:
    """One ModelInfer and one health check, each answered within 30 s."""
    with grpc.insecure_channel(target) as channel:
        reply = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            infer_request("mlp", X[:1]), timeout=30)
        out = np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(1, 10)
        np.testing.assert_allclose(out, bundles.reference(1, X[:1]), rtol=1e-4, atol=1e-5)
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_idle_streams_leave_inference_and_health_answering(bundles: Bundles,
                                                           tmp_path: Path) -> None:
    with limited_agent(tmp_path / "state", bundles, workers=2, max_streams=64,
                       max_streams_per_peer=64, stream_first_message_s=120,
                       stream_idle_s=120) as agent, \
            IdleStreams(agent.grpc, 4, send_first=infer_request("mlp", X[:1])) as used, \
            IdleStreams(agent.grpc, 8):
        # the used streams were answered once and now idle (before the fix, each held
        # one of the 2 handler threads: only 2 were ever answered)
        eventually(lambda: used.answers == 4, message=lambda: str(used.answers))
        for _ in range(3):
            _serves(agent.grpc, bundles)


def test_streams_beyond_the_per_peer_cap_are_refused_at_once(bundles: Bundles,
                                                             tmp_path: Path) -> None:
    with limited_agent(tmp_path / "state", bundles, max_streams_per_peer=3,
                       stream_first_message_s=120) as agent, \
            IdleStreams(agent.grpc, 5) as idle:
        eventually(lambda: len(idle.outcomes) >= 2, message=lambda: str(idle.outcomes))
        assert len(idle.outcomes) == 2
        for outcome in idle.outcomes:
            assert outcome.startswith("RESOURCE_EXHAUSTED"), outcome
            assert "grpc.max_streams_per_peer" in outcome
        _serves(agent.grpc, bundles)


def test_idle_streams_over_the_unix_socket(bundles: Bundles, tmp_path: Path) -> None:
    """The Unix socket is one peer: its streams are capped together, and idle ones leave
    inference and health on the same socket answering."""
    sock = tmp_path / "inference.sock"
    with limited_agent(tmp_path / "state", bundles, uds=sock, workers=2,
                       max_streams_per_peer=6, stream_first_message_s=120) as agent, \
            IdleStreams(f"unix:{sock}", 8) as idle:
        eventually(lambda: len(idle.outcomes) >= 2, message=lambda: str(idle.outcomes))
        assert all(o.startswith("RESOURCE_EXHAUSTED") and "unix already holds 6" in o
                   for o in idle.outcomes), idle.outcomes
        _serves(f"unix:{sock}", bundles)
        _serves(agent.grpc, bundles)


def test_total_stream_cap(bundles: Bundles, tmp_path: Path) -> None:
    with limited_agent(tmp_path / "state", bundles, max_streams=2,
                       stream_first_message_s=120) as agent, \
            IdleStreams(agent.grpc, 3) as idle:
        eventually(lambda: len(idle.outcomes) >= 1, message=lambda: str(idle.outcomes))
        assert idle.outcomes[0].startswith("RESOURCE_EXHAUSTED"), idle.outcomes
        assert "grpc.max_streams)" in idle.outcomes[0]


def test_silent_and_idle_streams_are_closed(bundles: Bundles, tmp_path: Path) -> None:
    with limited_agent(tmp_path / "state", bundles, stream_first_message_s=3.0,
                       stream_idle_s=1.0) as agent:
        with IdleStreams(agent.grpc, 3) as silent, \
                IdleStreams(agent.grpc, 2, send_first=infer_request("mlp", X[:1])) as used:
            eventually(lambda: len(silent.outcomes) == 3 and len(used.outcomes) == 2,
                              message=lambda: f"{silent.outcomes} {used.outcomes}")
            assert all(o.startswith("DEADLINE_EXCEEDED") and "sent no request" in o
                       for o in silent.outcomes), silent.outcomes
            assert all(o.startswith("DEADLINE_EXCEEDED") and "idle" in o
                       for o in used.outcomes), used.outcomes
            assert used.answers == 2
        # the closed streams gave their places back: new ones are served
        with IdleStreams(agent.grpc, 2, send_first=infer_request("mlp", X[:1])) as again:
            eventually(lambda: again.answers == 2, message="never true: again.answers == 2")


def test_a_busy_stream_answers_every_request_and_ends_ok(bundles: Bundles, tmp_path: Path) -> None:
    with limited_agent(tmp_path / "state", bundles, stream_first_message_s=10.0,
                       stream_idle_s=10.0) as agent, grpc.insecure_channel(agent.grpc) as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        requests = []
        for i in range(6):
            req = infer_request("mlp", X[i % 2:i % 2 + 1])
            req.id = f"r{i}"
            requests.append(req)
        replies = list(stub.ModelStreamInfer(iter(requests), timeout=60))
        # answered as they finish, matched by id as Triton's clients do (pipelined streams):
        # every request exactly once, in any order
        replies.sort(key=lambda r: r.infer_response.id)
        assert [r.infer_response.id for r in replies] == [f"r{i}" for i in range(6)]
        assert not any(r.error_message for r in replies)
        for i, r in enumerate(replies):
            out = np.frombuffer(r.infer_response.raw_output_contents[0], np.float32)
            np.testing.assert_allclose(out.reshape(1, 10),
                                       bundles.reference(1, X[i % 2:i % 2 + 1]),
                                       rtol=1e-4, atol=1e-5)


def test_health_answers_during_an_inference_overload(bundles: Bundles, tmp_path: Path) -> None:
    """Calls beyond 4 per handler thread are refused; health and ServerLive never are."""
    import asyncio

    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

    payload = infer_request("mlp", X[:1].repeat(32, axis=0)).SerializeToString()

    async def burst(target: str, n: int) -> list[str]:
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")

            async def one() -> str:
                try:
                    await call(payload, timeout=120)
                    return "OK"
                except grpc.aio.AioRpcError as exc:
                    return exc.code().name

            return await asyncio.gather(*(one() for _ in range(n)))

    with limited_agent(tmp_path / "state", bundles, workers=1) as agent, \
            grpc.insecure_channel(agent.grpc) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        kserve = pb_grpc.GRPCInferenceServiceStub(channel)
        done = threading.Event()
        answers: list[str] = []

        def probe() -> None:
            while not done.is_set():
                try:
                    status = health.Check(health_pb2.HealthCheckRequest(), timeout=30).status
                    live = kserve.ServerLive(pb.ServerLiveRequest(), timeout=30).live
                    answers.append("ok" if status == health_pb2.HealthCheckResponse.SERVING
                                   and live else f"bad: {status} {live}")
                except grpc.RpcError as exc:
                    answers.append(f"{exc.code().name}: {exc.details()}")

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        try:
            outcomes = []
            # at least 3 bursts; more until one overloads: the inference lane runs a tiny
            # model's calls as they come and may keep up with a burst (CI, 9e71686)
            for i in range(10):
                outcomes += asyncio.run(burst(agent.grpc, 400))
                if i >= 2 and "RESOURCE_EXHAUSTED" in outcomes:
                    break
        finally:
            done.set()
            prober.join(60)
        assert "RESOURCE_EXHAUSTED" in outcomes and "OK" in outcomes
        assert answers and set(answers) == {"ok"}, sorted(set(answers))


class SilentCalls:
    """``n`` calls of a unary ``method`` opened without ever sending their request (a raw
    client can do this; here a stream-unary call whose iterator never yields)."""

    def __init__(self, target: str, method: str, n: int) -> None:
        self.channel = grpc.insecure_channel(target)
        self.call = self.channel.stream_unary(method, request_serializer=None,
                                              response_deserializer=None)
        self.n = n
        self.release = threading.Event()
        self.futures: list[Any] = []

    def _never(self) -> Iterator[bytes]:
        self.release.wait(120)
        yield from ()

    def codes(self) -> list[str]:
        return [f.exception().code().name if f.exception() else "OK"
                for f in self.futures if f.done()]

    def __enter__(self) -> SilentCalls:
        self.futures = [self.call.future(self._never(), timeout=120) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        for f in self.futures:
            f.cancel()
        self.channel.close()


def test_calls_that_never_send_their_request_are_cancelled(bundles: Bundles,
                                                           tmp_path: Path) -> None:
    """8 silent ModelInfer calls fill a 2-thread agent's admission (2 x 4), 4 silent health
    checks its health threads: both are cancelled after request_arrival_s, and service
    resumes."""
    with limited_agent(tmp_path / "state", bundles, workers=2,
                       request_arrival_s=1.0) as agent, \
            SilentCalls(agent.grpc, "/inference.GRPCInferenceService/ModelInfer", 8) as infer, \
            SilentCalls(agent.grpc, "/grpc.health.v1.Health/Check", 4) as checks:
        eventually(lambda: len(infer.codes()) == 8 and len(checks.codes()) == 4,
                          message=lambda: str((
            infer.codes(), checks.codes())))
        assert set(infer.codes()) == {"CANCELLED"} and set(checks.codes()) == {"CANCELLED"}
        _serves(agent.grpc, bundles)
