"""Tuned vs. the profile's default settings: throughput at the same p99 budget, on this machine.

One agent process serves the MLP and the (conditioned) light squeezenet, both built for
x86_64-cpu-onnxruntime. For each model the budget is ``--budget-factor`` x the default
settings' p99 at concurrency 1; ``edge-agent tune``'s sweep (each candidate applied as a live
settings change, measured with ``edge-agent perf``'s load generator, the default settings put
back at the end) gives the best throughput within the budget; the figure is its ratio to the
default settings' best throughput within the same budget (both from the same run).

    python -m benchmarks.bench_tune --seconds 2 --candidates 6
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_serve import ORT, Proc


def build(work: Path, state: Path) -> None:
    """The MLP and the conditioned squeezenet, built and installed in ``state``."""
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles
    from tests.support.model_factory import conditioned_light_model, make_mlp

    out = work / "bundles"
    bundles = build_bundles(make_mlp(work / "mlp.onnx", seed=1), name="mlp", version=1,
                            profiles=[ORT], out_dir=out, dynamic_batch=True)
    bundles += build_bundles(conditioned_light_model("squeezenet", work), name="squeezenet",
                             version=1, profiles=[ORT], out_dir=out, dynamic_batch=True)
    for b in bundles:
        if agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned", str(b)]):
            raise SystemExit(f"add-bundle {b} failed")


def tune_one(client: object, grpc: str, model: str, levels: list[int], seconds: float,
             candidates: int, factor: float) -> tuple[float, float, float, str]:
    """(budget ms, default infer/s, tuned infer/s, the tuned settings) for one model."""
    from edge_agent.client.agent_client import AgentClient
    from edge_agent.perf.cli import prepare
    from edge_agent.perf.load import measure
    from edge_agent.perf.tune import candidate_grid, run_sweep

    assert isinstance(client, AgentClient)
    with prepare(grpc, model) as plan:
        def run(c: int) -> object:
            return measure(plan.target, plan.payloads, concurrency=c, seconds=seconds,
                           warmup_s=0.5)

        base = measure(plan.target, plan.payloads, concurrency=1, seconds=seconds)
        budget_ms = factor * base.percentile_us(99) / 1000
        backend = next((v.backend for v in client.models(model) if v.active), "")
        grid = candidate_grid(client.model_settings(model), backend=backend)[:candidates]
        sweep = run_sweep(client, model, grid, levels, run,  # type: ignore[arg-type]
                          budget_ms=budget_ms,
                          on_candidate=lambda i, c: print(f"  {model} #{i} {c.label()}",
                                                          file=sys.stderr, flush=True))
    budget_us = budget_ms * 1000
    default = sweep.candidates[0].best_point(budget_us)
    best = sweep.candidates[sweep.best] if sweep.best is not None else None
    tuned = best.best_point(budget_us) if best is not None else None
    return (budget_ms, default.throughput if default else 0.0,
            tuned.throughput if tuned else 0.0, best.label() if best else "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="measurement window per concurrency level (default 2)")
    parser.add_argument("--candidates", type=int, default=6,
                        help="candidates per model, the default settings first (default 6)")
    parser.add_argument("--concurrency", default="1,4,8", help="levels (default 1,4,8)")
    parser.add_argument("--budget-factor", type=float, default=3.0,
                        help="p99 budget = this x the default's p99 at concurrency 1")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    from edge_agent.client.agent_client import AgentClient

    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        work = Path(tmp)
        state = work / "state"
        build(work, state)
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state), "--grpc",
                      "127.0.0.1:0", "--no-uds", "--management", "127.0.0.1:0", "--insecure",
                      "--no-mdns", "--allow-unsigned"], "edge-agent ready")
        try:
            mgmt = re.search(r"management on (\S+?);", agent.line)
            assert mgmt is not None, agent.line
            token = (state / "management.token").read_text().strip()
            rows = []
            with AgentClient(mgmt[1], token=token) as client:
                grpc = client.info().inference_address
                for model in ("mlp", "squeezenet"):
                    rows.append((model, *tune_one(client, grpc, model, levels, args.seconds,
                                                  args.candidates, args.budget_factor)))
        finally:
            agent.stop()
    print(f"\ntuned vs default settings at the same p99 budget (concurrency {levels}, "
          f"{args.seconds:g} s per point, {args.candidates} candidates)")
    print(f"{'model':<12}{'budget':>10}{'default':>14}{'tuned':>14}{'ratio':>8}  tuned settings")
    for model, budget, default, tuned, label in rows:
        ratio = f"x{tuned / default:.2f}" if default else "-"
        print(f"{model:<12}{budget:>8.1f}ms{default:>10.0f}/s{tuned:>12.0f}/s{ratio:>8}  {label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
