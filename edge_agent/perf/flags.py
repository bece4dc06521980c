"""The ``edge-agent perf`` and ``edge-agent tune`` flags (light: argparse only, so that
``edge-agent --help`` loads no gRPC); the commands live in :mod:`edge_agent.perf.cli` and
:mod:`edge_agent.perf.tune_cli`."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from edge_agent.errors import InvalidInputError

PERF_DESCRIPTION = textwrap.dedent("""\
    Measure a served model's throughput and latency the way Triton's perf_analyzer does,
    with its flags and its report: for each concurrency level, keep that many requests in
    flight (each answer followed at once by the next request) for the measurement window,
    then print requests, throughput (inferences/s = requests x batch size) and latency
    (average, p50/p90/p95/p99), and the server's side of the window from the model's
    statistics (requests, executions, and per request: queue, compute input, compute
    infer, compute output, the rest as overhead). The requests are built once and sent as
    bytes from worker processes, each call on an HTTP/2 connection of its own, so the
    measuring side uses little CPU on the device it shares with the agent.

    Protocols: -i grpc (default) is KServe v2 gRPC on the agent's TCP port (-u HOST:PORT,
    default localhost:8001) or its Unix socket (-u unix:/path); -i http is KServe v2
    HTTP/REST on the port of `edge-agent serve --http` (-u HOST:PORT, default
    localhost:8000), the tensors in the binary tensor extension or JSON. Either measures
    a Triton server too. Exit 1 when a request failed.""")

DEFAULT_GRPC_URL = "localhost:8001"

EPILOG = textwrap.dedent("""\
    examples:
      # gRPC on the agent's TCP port, concurrency 1, 3, 5, ... 15
      edge-agent perf -m mlp -u 127.0.0.1:8001 --concurrency-range 1:16:2
      # the Unix socket, batches of 4, the inputs in system shared memory
      edge-agent perf -m resnet -u unix:/run/edge-agent/inference.sock -b 4 \\
          --shape input:3,224,224 --shared-memory system
      # HTTP/REST (edge-agent serve --http 8000), binary tensors; then JSON tensors
      edge-agent perf -m mlp -i http -u 127.0.0.1:8000
      edge-agent perf -m mlp -i http -u 127.0.0.1:8000 --input-tensor-format json \\
          --output-tensor-format json
      # real inputs, a 2 s window, the results as JSON for a script (report on stderr)
      edge-agent perf -m mlp -u triton-host:8001 --input-data samples.npz -p 2000 --json

    The report ends with perf_analyzer's lines ("Concurrency: N, throughput: X infer/sec,
    latency Y usec"; latency is the average, or --percentile's). With --json, stdout holds
    only a JSON list with one object per concurrency level.""")


def parse_range(text: str) -> list[int]:
    """perf_analyzer's ``START:END:STEP`` (END and STEP optional) as the concurrency levels."""
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        parts = []
    if not 1 <= len(parts) <= 3 or min(parts) < 1:
        raise InvalidInputError(f"--concurrency-range {text!r}: expected START[:END[:STEP]] "
                                "with positive integers (e.g. 1:16:2)")
    start = parts[0]
    end = parts[1] if len(parts) > 1 else start
    step = parts[2] if len(parts) > 2 else 1
    if end < start:
        raise InvalidInputError(f"--concurrency-range {text!r}: END {end} is below START "
                                f"{start}")
    return list(range(start, end + 1, step))


def add_perf_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``edge-agent perf``."""
    p = sub.add_parser("perf", help="measure throughput and latency (perf_analyzer's flags)",
                       description=PERF_DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model-name", required=True, metavar="MODEL",
                   help="the model to measure (as the server names it)")
    p.add_argument("-x", "--model-version", default="", metavar="V",
                   help="version to ask for (default: the one the server routes to)")
    p.add_argument("-u", "--url", default=None, metavar="ADDR",
                   help="gRPC: HOST:PORT or unix:/path/to.sock (default localhost:8001); "
                        "http: HOST:PORT (default localhost:8000)")
    p.add_argument("-i", "--protocol", default="grpc", choices=["grpc", "http"],
                   help="KServe v2 over gRPC (default) or HTTP/REST (serve --http)")
    p.add_argument("--input-tensor-format", default="binary", choices=["binary", "json"],
                   help="-i http: inputs in the binary tensor extension (default) or JSON")
    p.add_argument("--output-tensor-format", default="binary", choices=["binary", "json"],
                   help="-i http: outputs asked raw (default) or as JSON")
    p.add_argument("--concurrency-range", default="1", metavar="START:END:STEP",
                   help="concurrency levels, linear (default 1)")
    p.add_argument("-b", "--batch-size", type=int, default=1, metavar="N",
                   help="inferences per request (the first dimension; default 1)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME:D1,D2",
                   help="an input's shape without the batch dimension (variable dims)")
    p.add_argument("--shared-memory", default="none", choices=["none", "system", "cuda"],
                   help="system: tensors in POSIX shared memory registered with the server")
    p.add_argument("--input-data", default="random", metavar="FILE.npz|random",
                   help=".npz with one array per input (keyed by name), or random")
    p.add_argument("-p", "--measurement-interval", type=int, default=5000, metavar="MS",
                   help="measurement window per concurrency level (default 5000 ms)")
    p.add_argument("--percentile", type=int, default=None, metavar="P",
                   help="report this latency percentile instead of the average")
    p.add_argument("--json", action="store_true",
                   help="print only a JSON list of the results on stdout (the report goes to "
                        "stderr)")




TUNE_EPILOG = textwrap.dedent("""\
    examples:
      edge-agent tune mlp --agent 127.0.0.1:50051 --state-dir /var/lib/edge-agent \\
          --latency-budget-ms 10 --concurrency 1,4,16 --minutes 5 --apply
      edge-agent tune resnet --agent 127.0.0.1:50051 --insecure --token-file t.txt

    Every candidate is applied as a live settings change (the agent keeps serving), measured,
    and the settings before the run are put back; --apply then makes the best one the model's
    settings (revert with: edge-console settings MODEL --revert). Every run is stored in the
    agent's database (edge-console status shows the last one).""")


def parse_levels(text: str) -> list[int]:
    """``1,4,16`` as concurrency levels."""
    try:
        levels = [int(p) for p in text.split(",")]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise InvalidInputError(f"--concurrency {text!r}: expected positive integers "
                                "separated by commas (e.g. 1,4,16)")
    return levels


def add_tune_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``edge-agent tune``."""
    p = sub.add_parser("tune", help="find the best settings for a model on this device",
                       description="Sweep instance count, batch sizes, queue delay and runtime "
                                   "threads against the real model on a running agent, chart "
                                   "throughput against p99, and pick the best under a latency "
                                   "budget.", epilog=TUNE_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--agent", required=True, metavar="HOST:PORT",
                   help="the agent's management address")
    p.add_argument("--token-file", type=Path, metavar="F",
                   help="management token (default: STATE_DIR/management.token)")
    p.add_argument("--state-dir", type=Path, metavar="DIR",
                   help="the agent's state directory: its token and certificate fingerprint")
    p.add_argument("--fingerprint", metavar="SHA256:...",
                   help="the agent's certificate fingerprint (edge-agent token prints it)")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext management API (an agent started with --insecure)")
    p.add_argument("--url", metavar="ADDR",
                   help="inference address to measure (default: the agent's TCP listener; "
                        "unix:/path for its socket)")
    p.add_argument("--latency-budget-ms", type=float, metavar="X",
                   help="the best candidate keeps p99 within this (default: no budget)")
    p.add_argument("--concurrency", default="1,4,16", metavar="N,N,...",
                   help="concurrency levels measured per candidate (default 1,4,16)")
    p.add_argument("--minutes", type=float, default=5.0, metavar="N",
                   help="time budget: the candidate grid is cut to fit (default 5)")
    p.add_argument("--seconds", type=float, default=3.0, metavar="S",
                   help="measurement window per concurrency level (default 3)")
    p.add_argument("--max-candidates", type=int, metavar="K",
                   help="try at most K candidates (the first is the settings as they are)")
    p.add_argument("-b", "--batch-size", type=int, default=1, metavar="N",
                   help="inferences per request (default 1)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME:D1,D2",
                   help="an input's shape without the batch dimension (variable dims)")
    p.add_argument("--apply", action="store_true",
                   help="make the best candidate the model's settings (recorded, revertible)")
    p.add_argument("--json", action="store_true",
                   help="print only the run as JSON on stdout (table and chart go to stderr)")
