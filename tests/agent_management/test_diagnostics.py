"""GetDoctor, StreamLogs, QuerySystemMetrics and the stored per-version parity figures, on a real
agent (management gRPC on 127.0.0.1) through the Python client library."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from edge_agent.client.agent_client import AgentClient, ManagementError
from edge_agent.log_ring import LogRing
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import InProcessAgent, trusted_agent


@pytest.fixture(scope="module")
def agent(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessAgent]:
    with trusted_agent(tmp_path_factory.mktemp("diag") / "state", bundles.public_key,
                       name="diag-test", deploy=bundles.mlp[1]) as running:
        yield running


@pytest.fixture()
def client(agent: InProcessAgent) -> Iterator[AgentClient]:
    with agent.client() as c:
        yield c


def test_doctor_runs_on_the_agent(client: AgentClient, agent: InProcessAgent) -> None:
    report = client.doctor()
    by_check = {(f.area, f.check): f for f in report.findings}
    assert by_check[("device", "architecture")].status == "ok", report
    assert by_check[("runtimes", "onnxruntime")].status == "ok", report
    # the agent checks its own state directory
    assert any(f.area == "state" for f in report.findings)
    assert report.ok == all(f.status != "fail" for f in report.findings)


def test_logs_tail_and_follow(client: AgentClient) -> None:
    marker = f"diagnostics-marker-{time.time_ns()}"
    logging.getLogger("edge_agent.test").warning("%s one", marker)
    lines = list(client.logs(tail=500))
    assert any(marker in ln.message and ln.level == "WARNING" for ln in lines)
    seqs = [ln.seq for ln in lines]
    assert seqs == sorted(seqs)

    only_errors = list(client.logs(tail=500, min_level="error"))
    assert all(ln.level in ("ERROR", "CRITICAL") for ln in only_errors)

    got: list[str] = []
    seen = threading.Event()
    stream = client.logs(tail=1, follow=True)

    def read() -> None:
        for ln in stream:
            got.append(ln.message)
            if f"{marker} two" in ln.message:
                seen.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def streamed() -> bool:
        logging.getLogger("edge_agent.test").warning("%s two", marker)
        return seen.wait(0.5)

    try:
        eventually(streamed, timeout=30, interval=0, message=lambda: f"never streamed: {got}")
    finally:
        stream.close()


def test_logs_refuse_a_bad_level(client: AgentClient) -> None:
    with pytest.raises(ManagementError, match="unknown log level"):
        list(client.logs(min_level="loud"))


def test_system_history_is_served(client: AgentClient) -> None:
    points = eventually(lambda: client.query_system(step_s=1), timeout=60, interval=0.5,
                        message="no stored system sample")
    assert all(0 <= p.cpu_percent <= 100 * 64 and 0 < p.mem_percent <= 100 for p in points)
    assert all(p.disk_free_bytes > 0 for p in points)


def test_system_history_refuses_a_bad_range(agent: InProcessAgent) -> None:
    with grpc.insecure_channel(agent.management) as channel:
        stub = pb_grpc.AgentManagementStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.QuerySystemMetrics(pb.QuerySystemMetricsRequest(start=float("nan")),
                                    metadata=[("authorization", f"Bearer {agent.token}")],
                                    timeout=10)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "start must be unix seconds" in (err.value.details() or "")


def test_parity_figures_are_kept_per_version(client: AgentClient, bundles: Bundles) -> None:
    active = {v.version: v for v in client.models("mlp")}[1]
    assert active.parity is not None, active
    agreed, figures = active.parity
    assert agreed and figures
    assert client.deploy(bundles.mlp[2]).ok
    versions = {v.version: v for v in client.models("mlp")}
    assert versions[2].parity is not None and versions[2].parity[0]
    assert versions[1].parity == active.parity  # the old version keeps its own figures


def test_log_ring_is_bounded_and_keeps_order() -> None:
    ring = LogRing(capacity=3)
    log = logging.getLogger("edge_agent.test.ring")
    log.addHandler(ring)
    log.propagate = False
    try:
        for i in range(5):
            log.warning("line %d %s", i, "x" * 5000)
    finally:
        log.removeHandler(ring)
    lines, cursor = ring.tail(10)
    assert [ln.message.split()[1] for ln in lines] == ["2", "3", "4"]
    assert cursor == 5 and all(len(ln.message) <= 2000 for ln in lines)
    assert ring.after(cursor, timeout=0.01) == ([], cursor)
