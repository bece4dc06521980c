"""A/B of serving settings: several variants in one agent, interleaved in one run.

Each variant is the light squeezenet (dynamic batch) built for the ONNX Runtime (``ort``) or the
OpenVINO (``ov``) profile, or the MLP built for the ONNX Runtime profile (``mlp``), installed
under its own model name, with ``[models.NAME]`` overrides in one
agent.toml and, optionally, backend options patched into its manifest (``allow_spinning``).
Every round measures each in-process reference of bench_serve and then each variant at c=16
over the Unix socket, so load from elsewhere on the machine hits all of them alike. Printed per
variant: median throughput, the ratio to the best in-process reference of its runtime, server
CPU per image (the agent and its runtime processes), and the average batch the batcher formed.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_variants --rounds 5 --seconds 3
    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_variants --variants ort,ort_i2t1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from benchmarks.bench_serve import (
    ORT,
    OV,
    Proc,
    load,
    median_result,
    reference_runners,
)
from benchmarks.loadgen import LoadResult, infer_request_bytes


@dataclass(frozen=True)
class Variant:
    """A build (``ort``/``ov`` squeezenet, ``mlp``) with agent overrides and manifest options."""

    kind: str
    overrides: dict[str, Any] = field(default_factory=dict)
    backend_options: dict[str, Any] = field(default_factory=dict)


VARIANTS: dict[str, Variant] = {
    "ort": Variant("ort"),  # the profile's settings
    "ort_spin": Variant("ort", backend_options={"allow_spinning": True}),
    "ort_t2": Variant("ort", {"threads": 2}),
    "ort_i2t1": Variant("ort", {"instances": 2, "threads": 1}),
    "ort_i2t1_b8": Variant("ort", {"instances": 2, "threads": 1, "max_batch_size": 8,
                                   "preferred_batch_sizes": [4, 8]}),
    "ort_i2t1_b1": Variant("ort", {"instances": 2, "threads": 1, "max_batch_size": 1,
                                   "preferred_batch_sizes": []}),
    "ort_i2t1_p1": Variant("ort", {"instances": 2, "threads": 1, "preferred_batch_sizes": [1]}),
    "ort_i2t1_p2": Variant("ort", {"instances": 2, "threads": 1, "preferred_batch_sizes": [2]}),
    "ort_i2t1_p4": Variant("ort", {"instances": 2, "threads": 1, "preferred_batch_sizes": [4]}),
    "ort_b8": Variant("ort", {"max_batch_size": 8, "preferred_batch_sizes": [8]}),
    "ort_d0": Variant("ort", {"max_queue_delay_us": 0}),
    "mlp": Variant("mlp"),
    "mlp_i1": Variant("mlp", {"instances": 1}),
    "mlp_i1_t1": Variant("mlp", {"instances": 1, "threads": 1}),
    "ov": Variant("ov"),
    "ov_i1": Variant("ov", {"instances": 1}),
    "ov_b8": Variant("ov", {"max_batch_size": 8, "preferred_batch_sizes": [4, 8]}),
    "ov_thread": Variant("ov", {"isolation": "thread"}),
    "ov_pin": Variant("ov", backend_options={"enable_cpu_pinning": True}),
    "ov_thread_pin": Variant("ov", {"isolation": "thread"},
                             backend_options={"enable_cpu_pinning": True}),
    "ov_thread_p2": Variant("ov", {"isolation": "thread", "preferred_batch_sizes": [2]}),
    "ov_thread_p4": Variant("ov", {"isolation": "thread", "preferred_batch_sizes": [4]}),
    "ov_p1": Variant("ov", {"preferred_batch_sizes": [1]}),
    "ov_thread_p1": Variant("ov", {"isolation": "thread", "preferred_batch_sizes": [1]}),
}


def build_variants(work: Path, names: list[str]) -> Path:
    """Install one bundle per variant in a state dir; patch manifest options."""
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles
    from tests.support.model_factory import light_model_path, make_mlp

    models = {"ort": light_model_path("squeezenet"), "ov": light_model_path("squeezenet"),
              "mlp": make_mlp(work / "mlp.onnx", seed=1)}
    state = work / "state"
    for name in names:
        v = VARIANTS[name]
        profile = OV if v.kind == "ov" else ORT
        (bundle,) = build_bundles(models[v.kind], name=name, version=1, profiles=[profile],
                                  out_dir=work / "bundles", dynamic_batch=v.kind != "mlp",
                                  allow_parity_failure=v.kind != "mlp")  # support/model_factory
        if agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned",
                      str(bundle)]):
            raise SystemExit(f"add-bundle {bundle} failed")
        if v.backend_options:
            path = state / "models" / name / "1" / "manifest.json"
            manifest = json.loads(path.read_text())
            backend = "openvino" if v.kind == "ov" else "onnxruntime"
            manifest["backend_options"].setdefault(backend, {}).update(v.backend_options)
            path.write_text(json.dumps(manifest, sort_keys=True))
    return state


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(str(x) for x in value) + "]"
    return str(value)


def agent_toml(names: list[str]) -> str:
    lines: list[str] = []
    for name in names:
        if VARIANTS[name].overrides:
            lines.append(f"[models.{name}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in VARIANTS[name].overrides.items()]
    return "\n".join(lines) + "\n"


def average_batch(target: str, model: str) -> float:
    """inference_count / execution_count of ``model`` from ModelStatistics."""
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
    from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(target) as channel:
        stats = pb_grpc.GRPCInferenceServiceStub(channel).ModelStatistics(
            pb.ModelStatisticsRequest(name=model), timeout=10)
    s = stats.model_stats[0]
    return s.inference_count / max(1, s.execution_count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="ort,ort_spin,ort_i2t1,ov,ov_i1",
                        help="comma-separated, from: " + ", ".join(VARIANTS))
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", "-c", type=int, default=16,
                        help="requests in flight (over the Unix socket)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the in-process references (only variant vs variant)")
    args = parser.parse_args(argv)
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    rng = np.random.default_rng(0)
    feeds = {"ort": {"data_0": rng.random((1, 3, 224, 224), dtype=np.float32)},
             "mlp": {"input": rng.random((1, 64), dtype=np.float32)}}
    feeds["ov"] = feeds["ort"]
    with tempfile.TemporaryDirectory(prefix="bench-variants-") as tmp:
        work = Path(tmp)
        state = build_variants(work, names)
        config = work / "agent.toml"
        config.write_text(agent_toml(names))
        sock = work / "agent.sock"
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state),
                      "--grpc", "127.0.0.1:0", "--uds", str(sock), "--config", str(config)],
                     "edge-agent ready")
        tcp = re.search(r"127\.0\.0\.1:\d+", agent.line).group(0)
        print(f"agent ready in {agent.ready_s:.2f} s, RSS {agent.rss_mb():.0f} MiB (with runtime "
              f"processes); load average {os.getloadavg()[0]:.1f}")
        print(agent_toml(names).strip())
        try:
            refs: dict[str, Any] = {}
            if not args.no_reference:
                kinds = {VARIANTS[n].kind for n in names} - {"mlp"}
                for kind in sorted(kinds):
                    first = next(n for n in names if VARIANTS[n].kind == kind)
                    artifact = ("artifacts/onnxruntime/model.onnx" if kind == "ort"
                                else "artifacts/openvino/model.xml")
                    for label, run in reference_runners(
                            kind, state / "models" / first / "1" / artifact).items():
                        refs[f"{kind} {label}"] = run
            ref_runs: dict[str, list[tuple[float, float]]] = {k: [] for k in refs}
            served: dict[str, list[LoadResult]] = {n: [] for n in names}
            payloads = {n: infer_request_bytes(n, feeds[VARIANTS[n].kind]) for n in names}
            for r in range(args.rounds):
                for label, run in refs.items():
                    ref_runs[label].append(run(args.seconds))
                for n in names:
                    served[n].append(load(f"unix:{sock}", payloads[n], args.concurrency,
                                          args.seconds, agent.pid))
                print(f"  round {r + 1}/{args.rounds} done, load average "
                      f"{os.getloadavg()[0]:.1f}", flush=True)
            round_best: dict[str, list[float]] = {}  # kind -> best reference of each round
            for label, runs in ref_runs.items():
                kind = label.split()[0]
                cur = round_best.setdefault(kind, [0.0] * args.rounds)
                for i, (t, _) in enumerate(runs):
                    cur[i] = max(cur[i], t)
            best: dict[str, float] = {}
            for label, runs in ref_runs.items():
                med = sorted(runs)[len(runs) // 2]
                kind = label.split()[0]
                best[kind] = max(best.get(kind, 0.0), med[0])
                print(f"in-process {label:28s} {med[0]:7.1f}/s  {med[1]:6.0f} us CPU/img  "
                      f"rounds {[round(t) for t, _ in runs]}")
            for n in names:
                s = median_result(served[n])
                kind = VARIANTS[n].kind
                ratio = ""
                if kind in best:
                    per_round = sorted(x.throughput / b for x, b in zip(served[n], round_best[kind],
                                                                        strict=True))
                    ratio = (f"{s.throughput / best[kind]:.2f}x best in-process (median of "
                             f"per-round ratios {per_round[len(per_round) // 2]:.2f}x)")
                print(f"served {n:14s} {s.throughput:7.1f}/s  {s.cpu_us_per_request:6.0f} us "
                      f"CPU/req  p50 {s.p50_ms:7.3f} ms  avg batch "
                      f"{average_batch(tcp, n):4.1f}  {ratio}  rounds "
                      f"{[round(x.throughput) for x in served[n]]}")
            print(f"agent RSS after the runs {agent.rss_mb():.0f} MiB; load average "
                  f"{os.getloadavg()[0]:.1f}")
        finally:
            agent.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
