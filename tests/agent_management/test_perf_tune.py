"""``edge-agent perf`` and ``edge-agent tune`` as subprocesses against a real agent process
serving a real model: perf_analyzer's report lines over TCP, a Unix socket, system shared
memory and KServe v2 HTTP/REST (binary and JSON tensors); a short tuning sweep (2 candidates)
stored in the agent's database and applied as a recorded, revertible settings change; bad
flags are one line and exit 1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.bundles import Bundles
from tests.support.harness import ROOT, AgentProcess

LINE = re.compile(r"^Concurrency: (\d+), throughput: ([\d.]+) infer/sec, latency (\d+) usec$",
                  re.M)


def edge_agent(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "edge_agent.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def agent(bundles: Bundles, tmp_path: Path) -> Iterator[tuple[AgentProcess, str]]:
    run_dir = Path(tempfile.mkdtemp(prefix="perf-", dir="/tmp"))  # a short socket path
    sock = run_dir / "inf.sock"
    toml = tmp_path / "agent.toml"  # shared memory over HTTP (TCP): turned on
    toml.write_text("[http]\nshared_memory = true\n")
    proc = AgentProcess(tmp_path / "state", trust=bundles.public_key,
                        extra=["--no-mdns", "--http", "127.0.0.1:0", "--config", str(toml)])
    proc.args.remove("--no-uds")
    proc.args += ["--uds", str(sock)]
    try:
        with proc as running:
            with running.client() as client:
                assert client.deploy(bundles.mlp[1]).ok
            yield running, f"unix:{sock}"
    finally:
        sock.unlink(missing_ok=True)
        run_dir.rmdir()


def _levels(out: str) -> list[tuple[int, float]]:
    return [(int(c), float(t)) for c, t, _ in LINE.findall(out)]


def test_perf_reports_like_perf_analyzer_over_tcp_unix_and_shared_memory(
        agent: tuple[AgentProcess, str], tmp_path: Path) -> None:
    running, unix = agent
    tcp = edge_agent("perf", "-m", "mlp", "-u", running.grpc, "--concurrency-range", "1:3:2",
                     "-p", "400")
    assert tcp.returncode == 0, tcp.stderr
    assert [c for c, _ in _levels(tcp.stdout)] == [1, 3]
    assert all(t > 0 for _, t in _levels(tcp.stdout))
    assert "p99 latency:" in tcp.stdout and "Request concurrency: 3" in tcp.stdout
    before = {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith("edge-perf-")}
    data = tmp_path / "samples.npz"
    np.savez(data, input=np.random.default_rng(0).random((3, 64), dtype=np.float32))
    uds = edge_agent("perf", "-m", "mlp", "-u", unix, "-b", "4", "--input-data", str(data),
                     "--shared-memory", "system", "-p", "400", "--percentile", "99")
    assert uds.returncode == 0, uds.stderr
    ((level, throughput),) = _levels(uds.stdout)
    assert level == 1 and throughput > 0
    assert "Client p99 Batch Latency" in uds.stdout
    after = {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith("edge-perf-")}
    assert after <= before  # its region was unregistered and removed


def test_perf_over_http_binary_json_and_shared_memory(agent: tuple[AgentProcess, str]) -> None:
    import json

    running, _ = agent
    http = re.search(r"HTTP on (\S+?);", "".join(running.output))
    assert http, "".join(running.output)
    before = {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith("edge-perf-")}
    for extra in ([], ["--input-tensor-format", "json", "--output-tensor-format", "json"],
                  ["--shared-memory", "system", "-b", "4"]):
        run = edge_agent("perf", "-m", "mlp", "-i", "http", "-u", http[1], "-p", "400", *extra)
        assert run.returncode == 0, f"{extra}: {run.stderr}"
        ((level, throughput),) = _levels(run.stdout)
        assert level == 1 and throughput > 0, run.stdout
        assert "KServe v2 HTTP/REST" in run.stdout
    after = {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith("edge-perf-")}
    assert after <= before  # its region was unregistered and removed
    as_json = edge_agent("perf", "-m", "mlp", "-i", "http", "-u", f"http://{http[1]}", "-p",
                         "300", "--concurrency-range", "1:2", "--json")
    assert as_json.returncode == 0, as_json.stderr
    results = json.loads(as_json.stdout)  # the JSON only: the report went to stderr
    assert [r["concurrency"] for r in results] == [1, 2]
    assert all(r["protocol"] == "http" and r["requests"] > 0 and r["errors"] == 0
               for r in results)
    assert "Concurrency: 2, throughput:" in as_json.stderr


def _server_stats(target: str) -> dict[str, int]:
    """The MLP's success count and inference count, read by the test itself."""
    import grpc

    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
    from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(target) as channel:
        answer = pb_grpc.GRPCInferenceServiceStub(channel).ModelStatistics(
            pb.ModelStatisticsRequest(name="mlp"), timeout=30)
    return {"success": sum(s.inference_stats.success.count for s in answer.model_stats),
            "inferences": sum(s.inference_count for s in answer.model_stats)}


SERVER_BREAKDOWN = re.compile(
    r"  Server: \n    Inference count: (\d+)\n    Execution count: (\d+)\n    Successful "
    r"request count: (\d+)\n    Avg request latency: (\d+) usec \(overhead (\d+) usec \+ "
    r"queue (\d+) usec \+ compute input (\d+) usec \+ compute infer (\d+) usec \+ compute "
    r"output (\d+) usec\)")


def test_perf_reports_the_server_side_breakdown_of_exactly_its_requests(
        agent: tuple[AgentProcess, str]) -> None:
    """perf_analyzer's Server: block, from the window's ModelStatistics difference: the
    requests the server counted are the ones the client counted, over gRPC and HTTP."""
    import json

    running, _ = agent
    http = re.search(r"HTTP on (\S+?);", "".join(running.output))
    assert http, "".join(running.output)
    for protocol, url, batch in (("grpc", running.grpc, 2), ("http", http[1], 1)):
        before = _server_stats(running.grpc)
        run = edge_agent("perf", "-m", "mlp", "-i", protocol, "-u", url, "-b", str(batch),
                         "--concurrency-range", "1:2", "-p", "500", "--json")
        assert run.returncode == 0, run.stderr
        after = _server_stats(running.grpc)
        results = json.loads(run.stdout)
        blocks = SERVER_BREAKDOWN.findall(run.stderr)  # with --json the report is on stderr
        assert len(results) == len(blocks) == 2, run.stderr
        for level, block in zip(results, blocks, strict=True):
            server = level["server"]
            inferences, executions, successes, avg, *parts = (int(x) for x in block)
            # nothing in flight at either snapshot: the same requests on both sides
            assert server["success_count"] == successes == level["requests"] > 0, run.stderr
            assert server["inference_count"] == inferences == level["requests"] * batch
            assert 0 < executions <= successes
            assert round(server["request_us"]) == avg
            # the parts fit in the request's time in the server, which fits in the client's
            assert sum(parts) <= avg + len(parts)
            assert 0 < server["request_us"] <= level["avg_us"]
        # the windows are part of what the server served during the command (warm-ups too)
        measured = sum(r["requests"] for r in results)
        assert after["success"] - before["success"] > measured
        assert after["inferences"] - before["inferences"] > measured * batch


def test_perf_calls_succeed_fail_recover_and_name_the_refusal(
        agent: tuple[AgentProcess, str]) -> None:
    """edge-agent perf's HTTP/2 call (no grpcio on the hot path) against the real agent over
    TCP and its Unix socket: an answered call returns, a refused one raises without losing
    the connection (a 1 MB request goes through the server's flow-control windows first), and
    the measurement counts failures with the server's own words."""
    from edge_agent.perf.h2unary import H2Unary, UnaryCallFailed
    from edge_agent.perf.inputs import request_bytes
    from edge_agent.perf.load import measure
    from edge_agent.perf.workers import INFER_METHOD

    running, unix = agent
    good = request_bytes("mlp", {"input": np.ones((2, 64), np.float32)})
    unknown = request_bytes("nosuch", {"input": np.ones((1, 64), np.float32)})
    huge = request_bytes("mlp", {"input": np.ones((4096, 64), np.float32)})  # > max batch
    for target in (running.grpc, unix):
        call = H2Unary(target, INFER_METHOD)
        try:
            call(good)
            for bad in (unknown, huge):
                with pytest.raises(UnaryCallFailed) as refused:
                    call(bad)
                assert not refused.value.connection
            call(good)
            call.max_frame = 3  # the request in 3-byte DATA frames: the gRPC prefix split too
            call(good)
            assert call.stream == 9 and call.sock is not None  # one connection throughout
        finally:
            call.close()
    m = measure(running.grpc, [good, unknown], concurrency=2, seconds=0.3, warmup_s=0.1,
                batch=2)
    assert m.requests > 0 and m.errors > 0
    assert "NOT_FOUND" in m.first_error and "nosuch" in m.first_error, m.first_error


def test_perf_help_teaches() -> None:
    out = edge_agent("perf", "--help").stdout
    assert "flags (light: argparse only" not in out  # the module's docstring is not help
    assert "perf_analyzer" in out and "examples:" in out and "-i http" in out


@pytest.mark.parametrize(("args", "words"), [
    (["--concurrency-range", "4:2"], "below START"),
    (["--shape", "input"], "NAME:D1,D2"),
    (["--shape", "nosuch:3"], "not inputs"),
    (["-i", "http"], "no HTTP/1.1 answer"),  # -u is the gRPC port
    (["--input-tensor-format", "json"], "apply to -i http"),
    (["--shared-memory", "cuda"], "not supported"),
    (["-m", "nosuchmodel"], "nosuchmodel"),
])
def test_perf_bad_flags_are_one_line(agent: tuple[AgentProcess, str], args: list[str],
                                     words: str) -> None:
    running, _ = agent
    base = ["perf", "-m", "mlp", "-u", running.grpc, "-p", "200"]
    run = edge_agent(*base, *args)
    assert run.returncode == 1, run.stdout
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0], run.stderr


def test_tune_sweeps_stores_and_applies_the_best(agent: tuple[AgentProcess, str]) -> None:
    running, _ = agent
    token = running.state_dir / "management.token"
    with running.client() as client:
        before = len(client.deployments("mlp"))
    run = edge_agent("tune", "mlp", "--agent", running.management, "--token-file", str(token),
                     "--insecure", "--concurrency", "1,2", "--seconds", "1",
                     "--max-candidates", "2", "--latency-budget-ms", "5000", "--apply",
                     "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "throughput vs p99 latency" in run.stderr  # the plotext chart: --json puts it there
    assert "★" in run.stderr
    import json

    sweep = json.loads(run.stdout)  # stdout holds the JSON only
    assert len(sweep["candidates"]) == 2 and sweep["applied"] is True
    assert all(c["ok"] and len(c["points"]) == 2 for c in sweep["candidates"])
    best = sweep["candidates"][sweep["best"]]["settings"]
    with running.client() as client:
        (stored,) = client.tuning("mlp", latest_only=True)
        assert stored.data["best"] == sweep["best"] and "best (p99 <= 5000 ms)" in stored.summary
        live = {s.key: s.value for s in client.model_settings("mlp") if s.source == "live"}
        assert live == best
        kinds = [d.kind for d in client.deployments("mlp")[:-before or None]]
    # candidate 1 applied, the settings before put back, then the best applied (if it changes
    # anything): each a recorded settings change
    assert kinds and set(kinds) == {"settings"}
    if best:  # revertible: back to the settings before the run
        with running.client() as client:
            assert client.set_model_settings("mlp", revert=True).ok
            assert not [s for s in client.model_settings("mlp") if s.source == "live"]


def test_tune_needs_a_token_and_tls_or_insecure(agent: tuple[AgentProcess, str]) -> None:
    running, _ = agent
    run = edge_agent("tune", "mlp", "--agent", running.management)
    assert run.returncode == 1 and "no token" in run.stderr
    token = str(running.state_dir / "management.token")
    run = edge_agent("tune", "mlp", "--agent", running.management, "--token-file", token)
    assert run.returncode == 1 and "--fingerprint" in run.stderr


def test_the_grid_and_the_choice_within_the_budget() -> None:
    from edge_agent.client.types import SettingInfo
    from edge_agent.perf.flags import parse_range
    from edge_agent.perf.tune import Candidate, Point, Sweep, candidate_grid, plan_size

    now = [SettingInfo("instances", "2", "bundle"), SettingInfo("max_batch_size", "32", "bundle"),
           SettingInfo("max_queue_delay_us", "500", "bundle")]
    grid = candidate_grid(now, backend="openvino", cores=2)
    assert grid[0] == {} and {"instances": "1"} in grid and {"max_queue_delay_us": "0"} in grid
    assert {"instances": "2"} not in grid  # no candidate repeats the settings as they are
    assert {"openvino_hint": '"THROUGHPUT"'} in grid
    assert {"max_batch_size": "4"} in grid and {"preferred_batch_sizes": "[8]"} in grid
    assert not any("openvino_hint" in c for c in candidate_grid(now, backend="onnxruntime"))
    assert len(grid) == len({tuple(sorted(c.items())) for c in grid})
    assert plan_size(1, 3, 2.0, 0.5) == 5 and plan_size(0.01, 3, 2.0, 0.5) == 1
    assert parse_range("1:16:2") == [1, 3, 5, 7, 9, 11, 13, 15] and parse_range("4") == [4]

    def cand(settings: dict[str, str], *points: tuple[int, float, float]) -> Candidate:
        return Candidate(settings, True, "", [Point(c, t, p99 / 2, p99, p99 / 2, 0)
                                              for c, t, p99 in points])

    fast_but_slow_tail = cand({"instances": "1"}, (1, 500, 2000), (4, 900, 20_000))
    steady = cand({}, (1, 400, 1500), (4, 700, 4000))
    sweep = Sweep("m", 5.0, [1, 4], {}, [steady, fast_but_slow_tail])
    assert sweep.choose() == 0  # 700/s within 5 ms beats 500/s
    assert "700.0 infer/s" in sweep.summary() and "the settings before" not in sweep.summary()
    assert Sweep("m", None, [1, 4], {}, [steady, fast_but_slow_tail]).choose() == 1
    assert Sweep("m", 1.0, [1, 4], {}, [steady, fast_but_slow_tail]).choose() is None
