"""``edge-agent perf``: perf_analyzer's flags and report, over KServe v2 gRPC (TCP or a Unix
socket) or KServe v2 REST (``-i http``), measured by :mod:`edge_agent.perf.load`."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from edge_agent.errors import InvalidInputError
from edge_agent.perf.flags import DEFAULT_GRPC_URL, parse_range
from edge_agent.perf.inputs import (
    SystemSharedMemory,
    describe_model,
    make_inputs,
    parse_shapes,
    request_bytes,
)
from edge_agent.perf.load import Measurement, measure
from edge_agent.perf.rest import (
    DEFAULT_HTTP_URL,
    RestRegions,
    describe_model_http,
    http_target,
    infer_message,
)
from edge_agent.perf.server_stats import stats_reader
from edge_agent.perf.workers import WorkerPool


@dataclass(frozen=True)
class PerfPlan:
    """What to send where: the serialized request(s), the batch size and the protocol."""

    target: str
    payloads: tuple[bytes, ...]
    batch: int
    protocol: str = "grpc"


@contextlib.contextmanager
def prepare(target: str, model: str, *, version: str = "", batch: int = 1,
            shapes: Sequence[str] = (), input_data: str = "random",
            shared_memory: str = "none", protocol: str = "grpc",
            input_format: str = "binary", output_format: str = "binary") -> Iterator[PerfPlan]:
    """Describe the model, build its inputs and (shared memory) register them; yields the
    plan and unregisters on exit. ``protocol`` "http": KServe v2 REST, the tensors in the
    binary extension or JSON (``input_format``, ``output_format``)."""
    if batch < 1:
        raise InvalidInputError(f"-b {batch}: the batch size must be >= 1")
    if shared_memory == "cuda":
        raise InvalidInputError("--shared-memory cuda is not supported by edge-agent perf; "
                                "use system or none")
    if protocol == "http":
        rest = http_target(target)
        spec = describe_model_http(rest, model, version)
    else:
        spec = describe_model(target, model, version)
    data_file = None if input_data == "random" else Path(input_data)
    inputs = make_inputs(spec, batch=batch, shapes=parse_shapes(list(shapes)),
                         data_file=data_file)
    region = None if shared_memory != "system" else SystemSharedMemory(
        target, RestRegions(rest) if protocol == "http" else None)
    try:
        regions, outputs = region.place(spec, inputs, batch) if region is not None else ({}, {})
        if protocol == "http":
            payload = infer_message(rest, model, inputs, version, input_format=input_format,
                                    output_format=output_format, regions=regions,
                                    outputs=outputs)
        else:
            payload = request_bytes(model, inputs, version, regions, outputs)
        yield PerfPlan(target, (payload,), batch, protocol)
    finally:
        if region is not None:
            region.close()


def report_block(m: Measurement) -> str:
    """perf_analyzer's per-concurrency block."""
    lines = [f"Request concurrency: {m.concurrency}", "  Client: ",
             f"    Request count: {m.requests}",
             f"    Throughput: {m.throughput:.3f} infer/sec",
             f"    Avg latency: {m.avg_us:.0f} usec (standard deviation {m.std_us:.0f} usec)"]
    lines += [f"    p{p} latency: {m.percentile_us(p):.0f} usec" for p in (50, 90, 95, 99)]
    if m.errors:
        lines.append(f"    Failed requests: {m.errors} (first: {m.first_error})")
    if m.server is not None:
        lines += m.server.report()
    return "\n".join(lines)


def summary_line(m: Measurement, percentile: int | None = None) -> str:
    """perf_analyzer's summary line for one concurrency level."""
    latency = m.avg_us if percentile is None else m.percentile_us(percentile)
    return (f"Concurrency: {m.concurrency}, throughput: {m.throughput:.3f} infer/sec, "
            f"latency {latency:.0f} usec")


def cmd_perf(args: argparse.Namespace) -> int:
    """Run ``edge-agent perf``: the report on stdout, or with ``--json`` only the JSON there
    (the report then goes to stderr, as progress)."""
    if args.measurement_interval <= 0:
        raise InvalidInputError("-p must be a positive number of milliseconds")
    if args.percentile is not None and not 1 <= args.percentile <= 99:
        raise InvalidInputError(f"--percentile {args.percentile}: expected 1..99")
    if args.protocol == "grpc" and (args.input_tensor_format != "binary"
                                    or args.output_tensor_format != "binary"):
        raise InvalidInputError("--input-tensor-format and --output-tensor-format apply to "
                                "-i http (gRPC sends raw tensors)")
    url = args.url or (DEFAULT_HTTP_URL if args.protocol == "http" else DEFAULT_GRPC_URL)
    levels = parse_range(args.concurrency_range)
    seconds = args.measurement_interval / 1000
    out = sys.stderr if args.json else sys.stdout
    service = ("KServe v2 gRPC" if args.protocol == "grpc" else
               f"KServe v2 HTTP/REST ({args.input_tensor_format} inputs, "
               f"{args.output_tensor_format} outputs)")
    print("*** Measurement Settings ***", file=out)
    print(f"  Batch size: {args.batch_size}", file=out)
    print(f"  Service Kind: {service} (edge-agent perf)", file=out)
    print(f"  Measurement window: {args.measurement_interval} msec", file=out)
    print(f"  Concurrency: {', '.join(map(str, levels))}", file=out)
    print(f"  Shared memory: {args.shared_memory}\n", file=out, flush=True)
    results: list[Measurement] = []
    stats = stats_reader(url, args.model_name, args.model_version, args.protocol)
    with prepare(url, args.model_name, version=args.model_version, batch=args.batch_size,
                 shapes=args.shape, input_data=args.input_data,
                 shared_memory=args.shared_memory, protocol=args.protocol,
                 input_format=args.input_tensor_format,
                 output_format=args.output_tensor_format) as plan, \
            WorkerPool(plan.target) as pool:
        for level in levels:
            m = measure(plan.target, plan.payloads, concurrency=level, seconds=seconds,
                        warmup_s=min(1.0, seconds / 4), batch=plan.batch,
                        protocol=plan.protocol, pool=pool, stats=stats)
            results.append(m)
            print(report_block(m) + "\n", file=out, flush=True)
    label = "Client Average" if args.percentile is None else f"Client p{args.percentile}"
    print(f"Inferences/Second vs. {label} Batch Latency", file=out)
    for m in results:
        print(summary_line(m, args.percentile), file=out)
    if args.json:
        print(json.dumps([{"concurrency": m.concurrency, "throughput": m.throughput,
                           "avg_us": m.avg_us, "p50_us": m.percentile_us(50),
                           "p99_us": m.percentile_us(99), "requests": m.requests,
                           "errors": m.errors, "protocol": args.protocol,
                           "server": m.server.as_json() if m.server else None}
                          for m in results]))
    failed = [m for m in results if m.errors]
    if failed:
        print(f"edge-agent perf: error: {failed[0].errors} request(s) failed at concurrency "
              f"{failed[0].concurrency}: {failed[0].first_error}", file=sys.stderr)
        return 1
    return 0
