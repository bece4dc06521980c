"""``edge-agent tune``: connect to the agent, sweep (:mod:`edge_agent.perf.tune`), show a rich
table and a plotext chart of throughput against p99, store the run, optionally apply. With
``--json`` the table, the chart and the progress go to stderr and stdout holds the JSON only."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from edge_agent.client.agent_client import AgentClient, PinnedTls
from edge_agent.errors import InvalidInputError
from edge_agent.perf.cli import prepare
from edge_agent.perf.flags import parse_levels
from edge_agent.perf.load import measure
from edge_agent.perf.tune import Candidate, Sweep, apply_best, candidate_grid, plan_size, run_sweep
from edge_agent.perf.workers import WorkerPool

WARMUP_S = 0.5


def connect(args: argparse.Namespace) -> AgentClient:
    """A management client from the flags (token and certificate from --state-dir)."""
    token_file: Path | None = args.token_file
    if token_file is None and args.state_dir is not None:
        token_file = args.state_dir / "management.token"
    if token_file is None:
        raise InvalidInputError("no token: pass --token-file F or --state-dir DIR (the "
                                "agent's, holding management.token)")
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise InvalidInputError(f"--token-file {token_file}: {exc.strerror or exc}") from None
    tls = None
    if not args.insecure:
        fingerprint = args.fingerprint
        if fingerprint is None and args.state_dir is not None:
            from edge_agent.management.tls import fingerprint_of

            fingerprint = fingerprint_of(args.state_dir)
        if fingerprint is None:
            raise InvalidInputError("TLS: pass --fingerprint (edge-agent token prints it) or "
                                    "--state-dir DIR, or --insecure for a plaintext agent")
        tls = PinnedTls(fingerprint)
    return AgentClient(args.agent, token=token, tls=tls)


def table(sweep: Sweep) -> Any:
    """A rich table: one row per candidate, its best point within the budget."""
    from rich.table import Table

    t = Table(title=f"tuning {sweep.model}: throughput (infer/s) and p99 (ms) per concurrency",
              title_justify="left")
    for col in ("", "#", "settings", *[f"c={c}" for c in sweep.concurrency], "best"):
        t.add_column(col)
    for i, c in enumerate(sweep.candidates):
        cells = [f"{p.throughput:.0f}/s p99 {p.p99_us / 1000:.2f}" + (
            f" ({p.errors} err)" if p.errors else "") for p in c.points]
        if not c.ok:
            cells = [f"[red]failed: {c.error[:60]}[/]"] + [""] * (len(sweep.concurrency) - 1)
        best = c.best_point(sweep.budget_us())
        t.add_row("★" if i == sweep.best else "", str(i), c.label(), *cells,
                  f"{best.throughput:.0f}/s" if best else "-")
    return t


def chart(sweep: Sweep, width: int = 100, height: int = 24, *, color: bool = False) -> str:
    """The Model Analyzer chart: throughput against p99 latency, one line per candidate."""
    import plotext as plt

    plt.clear_figure()
    plt.theme("clear")
    plt.plotsize(width, height)
    plt.title(f"{sweep.model}: throughput vs p99 latency")
    plt.xlabel("p99 latency (ms)")
    plt.ylabel("infer/s")
    for i, c in enumerate(sweep.candidates):
        if c.points:
            plt.plot([p.p99_us / 1000 for p in c.points], [p.throughput for p in c.points],
                     label=f"{'*' if i == sweep.best else ''}#{i}", marker="dot")
    if sweep.budget_ms is not None:
        plt.vline(sweep.budget_ms)
    drawn = str(plt.build())
    return drawn if color else str(plt.uncolorize(drawn))


def cmd_tune(args: argparse.Namespace) -> int:
    """Run ``edge-agent tune``."""
    levels = parse_levels(args.concurrency)
    if args.minutes <= 0 or args.seconds <= 0:
        raise InvalidInputError("--minutes and --seconds must be positive")
    if args.max_candidates is not None and args.max_candidates < 1:
        raise InvalidInputError("--max-candidates must be >= 1")
    if args.latency_budget_ms is not None and args.latency_budget_ms <= 0:
        raise InvalidInputError("--latency-budget-ms must be positive")
    from rich.console import Console

    stream = sys.stderr if args.json else sys.stdout  # --json: stdout holds the JSON only
    out = Console(file=stream)
    with connect(args) as client:
        info = client.info()
        url = args.url or info.inference_address
        if not url:
            raise InvalidInputError("the agent has no TCP inference listener; pass --url "
                                    "unix:/path/to/inference.sock")
        current = client.model_settings(args.model)
        backend = next((v.backend for v in client.models(args.model) if v.active), "")
        grid = candidate_grid(current, backend=backend)
        fit = plan_size(args.minutes, len(levels), args.seconds, WARMUP_S)
        count = min(len(grid), fit, args.max_candidates or fit)
        out.print(f"tuning {args.model} on {info.name} ({backend or '?'}): {count} of "
                  f"{len(grid)} candidates, concurrency {levels}, {args.seconds:g} s each")

        def progress(i: int, c: Candidate) -> None:
            best = max((p.throughput for p in c.points), default=0.0)
            state = f"{best:.0f} infer/s max" if c.ok else f"failed: {c.error}"
            out.print(f"  #{i} {c.label()}: {state}")

        with prepare(url, args.model, batch=args.batch_size, shapes=args.shape) as plan, \
                WorkerPool(plan.target) as pool:
            sweep = run_sweep(
                client, args.model, grid[:count], levels,
                lambda c: measure(plan.target, plan.payloads, concurrency=c,
                                  seconds=args.seconds, warmup_s=WARMUP_S, batch=plan.batch,
                                  pool=pool),
                budget_ms=args.latency_budget_ms, on_candidate=progress)
        if args.apply:
            result = apply_best(client, sweep)
            if result is not None and not result.ok:
                out.print(f"[red]applying the best settings failed: {result.message}[/]")
        out.print(table(sweep))
        print(chart(sweep, color=stream.isatty()), file=stream)
        summary = sweep.summary()
        run_id = client.record_tuning(args.model, summary, sweep.to_json())
        out.print(f"{summary}\n(stored as tuning run {run_id} on the agent)")
    if args.json:
        print(json.dumps(sweep.to_json()))
    if args.apply and not sweep.applied:
        print("edge-agent tune: error: nothing applied: "
              + ("no candidate met the budget" if sweep.best is None else
                 "the best settings did not apply"), file=sys.stderr)
        return 1
    return 0
