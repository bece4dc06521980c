"""Triton's perf_analyzer (tritonclient 2.41's binary) runs unchanged against a real agent.

Over gRPC, over HTTP and with ``--shared-memory system``, for a few seconds each: it completes,
measures a throughput above zero and prints the server-side breakdown it reads from the agent's
ModelStatistics. Skips, with the reason, when perf_analyzer or a library it loads cannot be
installed (edge_agent/perf_analyzer.py; scripts/system-deps.sh installs libb64-0d).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from edge_agent.cli import main as agent_cli
from edge_agent.config import load_config
from edge_agent.perf_analyzer import PerfAnalyzer, PerfAnalyzerUnavailableError, locate
from packager.build import build_bundles
from packager.triton_samples import make_add_sub
from tests.support.harness import InProcessAgent, running

PROFILE = "x86_64-cpu-onnxruntime"
THROUGHPUT = re.compile(r"Throughput: ([0-9.]+) infer/sec")
#: perf_analyzer's server-side section (from ModelStatistics), as 2.41 prints it.
SERVER_LINES = ("Server: ", "Inference count: ", "Execution count: ",
                "Successful request count: ", "Avg request latency: ")
BREAKDOWN = re.compile(r"Avg request latency: \d+ usec \(overhead \d+ usec \+ queue \d+ usec "
                       r"\+ compute input \d+ usec \+ compute infer \d+ usec \+ compute output "
                       r"\d+ usec\)")


@pytest.fixture(scope="module")
def perf_analyzer() -> PerfAnalyzer:
    try:
        return locate()
    except PerfAnalyzerUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessAgent]:
    """An agent serving Triton's ``simple`` (INT32 [-1,16] x2 -> sum, difference)."""
    root = tmp_path_factory.mktemp("perf-analyzer")
    state = root / "state"
    source = make_add_sub(root / "simple.onnx")
    (bundle,) = build_bundles(source, name="simple", version=1, profiles=[PROFILE],
                              out_dir=root / "bundles", max_batch=8)
    assert agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned",
                      str(bundle)]) == 0
    toml = root / "agent.toml"  # perf_analyzer's shared memory goes over TCP: turned on
    toml.write_text("[grpc]\ntcp_shared_memory = true\n[http]\nshared_memory = true\n")
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0", no_uds=True,
                         http_address="127.0.0.1:0")
    with running(config, timeout_s=180, name="perf-analyzer-agent") as served:
        yield served


@pytest.mark.parametrize("protocol,extra", [
    ("grpc", ()),
    ("http", ()),
    ("grpc", ("--shared-memory", "system")),
    ("http", ("--shared-memory", "system")),
], ids=["grpc", "http", "grpc-system-shm", "http-system-shm"])
def test_perf_analyzer_measures_the_agent(perf_analyzer: PerfAnalyzer, agent: InProcessAgent,
                                          protocol: str, extra: tuple[str, ...]) -> None:
    assert agent.addresses is not None
    url = agent.addresses.tcp if protocol == "grpc" else agent.addresses.http
    assert url
    out = perf_analyzer.run("-m", "simple", "-u", url, "-i", protocol, "-b", "1",
                            "--concurrency-range", "1", "--measurement-interval", "1000",
                            "--stability-percentage", "100", "--max-trials", "10", *extra)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    match = THROUGHPUT.search(text)
    assert match and float(match[1]) > 0, text
    for line in SERVER_LINES:
        assert line in text, f"no {line!r} in perf_analyzer's output:\n{text}"
    assert BREAKDOWN.search(text), text
