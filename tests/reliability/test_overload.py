"""Overload of a real agent process: a burst of callers far beyond its capacity. The excess is
refused with RESOURCE_EXHAUSTED (not queued without bound), the agent's memory stays bounded,
nobody gets another error, and it serves normally once the burst is over.

gRPC's own early rejection (``maximum_concurrent_rpcs``) races the client's upload: a few
percent of rejected calls reach the client as CANCELLED instead of RESOURCE_EXHAUSTED (a bare
grpcio server shows the same, 773 of 22,500 calls in 15 bursts). The test accepts CANCELLED as
a rejection and proves, from the model's statistics, that exactly the OK calls ran."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest

from edge_agent.client.agent_client import AgentClient
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import AgentProcess
from tests.support.traffic import served_version

INFER = "/inference.GRPCInferenceService/ModelInfer"
BURST = 1500  # concurrent calls; the agent admits 4 per handler thread (8)
PER_CONNECTION = 15  # below [grpc] max_concurrent_streams (16)
ROWS = 32


def _payload() -> bytes:
    x = np.random.default_rng(2).standard_normal((ROWS, 64)).astype(np.float32)
    msg = pb.ModelInferRequest(model_name="mlp")
    msg.inputs.add(name="input", datatype="FP32", shape=x.shape)
    msg.raw_input_contents.append(x.tobytes())
    return msg.SerializeToString()


async def _burst(target: str, n: int) -> list[tuple[str, str]]:
    """``n`` calls at once, at most PER_CONNECTION on each connection (the agent lets a
    connection have 16 calls open: a client queues the rest itself)."""
    payload = _payload()
    channels = [grpc.aio.insecure_channel(target, options=[
        ("grpc.use_local_subchannel_pool", 1)]) for _ in range(-(-n // PER_CONNECTION))]

    async def one(i: int) -> tuple[str, str]:
        try:
            await channels[i // PER_CONNECTION].unary_unary(INFER)(payload, timeout=120)
            return "OK", ""
        except grpc.aio.AioRpcError as exc:
            return exc.code().name, exc.details() or ""

    try:
        return await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        for channel in channels:
            await channel.close()


def _successes(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        stats = pb_grpc.GRPCInferenceServiceStub(channel).ModelStatistics(
            pb.ModelStatisticsRequest(name="mlp"), timeout=60)
    return sum(m.inference_stats.success.count for m in stats.model_stats)


@pytest.mark.slow
def test_a_burst_beyond_capacity_is_shed_with_resource_exhausted_and_recovers(
        bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as agent:
        token = (state / "management.token").read_text().strip()
        with AgentClient(agent.management, token=token) as client:
            assert client.deploy(bundles.mlp[1]).ok
        assert agent.proc is not None
        proc = psutil.Process(agent.proc.pid)
        asyncio.run(_burst(agent.grpc, 64))  # warm up
        rss_before = proc.memory_info().rss
        ran_before = _successes(agent.grpc)
        outcomes = asyncio.run(_burst(agent.grpc, BURST))
        rss_after = proc.memory_info().rss
        codes = Counter(code for code, _ in outcomes)
        assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED", "CANCELLED"}, codes
        assert codes["OK"] > 0 and codes["RESOURCE_EXHAUSTED"] > codes["CANCELLED"], codes
        assert all(why for code, why in outcomes if code != "OK")
        # every call that was not answered OK was refused before it ran: nothing ran unanswered
        # (statistics of a batch are booked just after its callers are answered: wait for them)
        eventually(lambda: _successes(agent.grpc) - ran_before >= codes["OK"], timeout=60,
                   message=lambda: f"booked successes never reached {codes}")
        ran = _successes(agent.grpc) - ran_before
        assert ran == codes["OK"], (ran, codes)
        assert rss_after - rss_before < 64 * 2**20, (rss_before, rss_after)
        # recovered: a normal caller is served, every time
        for _ in range(50):
            assert served_version(agent.grpc)[0] == "1"
        assert Counter(c for c, _ in asyncio.run(_burst(agent.grpc, 16))) == {"OK": 16}
