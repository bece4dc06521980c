"""``edge-console doctor`` and ``edge-console logs``: an agent's device checks and its own log,
read over the management API (no shell on the device needed)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

Adder = Callable[[argparse.ArgumentParser], None]

_LEVEL_COLORS = {"WARNING": "yellow", "ERROR": "red", "CRITICAL": "bold red", "DEBUG": "dim"}
_STATUS_COLORS = {"fail": "red", "warn": "yellow", "ok": "green"}


def add_parsers(sub: Any, common: Callable[..., None], raw: type[argparse.HelpFormatter]) -> None:
    """Add the two subcommands to ``edge-console``'s parser (``common`` adds --agent & co)."""
    doctor = sub.add_parser(
        "doctor", help="an agent's device checks (edge-agent doctor, run on the device)",
        description="Ask each --agent to run its device checks: architecture, CPU features, "
                    "memory, disk, runtimes with their execution providers and devices, GPU / "
                    "Jetson, the profile it reports and its state directory's health; each "
                    "problem with its fix. Exit 1 when a check failed on any agent.",
        epilog="example:\n  edge-console doctor --agent 192.168.1.20:50051 --token-file pi.token",
        formatter_class=raw)
    common(doctor)
    doctor.add_argument("--json", action="store_true", help="print JSON")

    logs = sub.add_parser(
        "logs", help="an agent's own recent log lines (and new ones with --follow)",
        description="Print the agent's recent log lines, kept in a bounded ring in its memory "
                    "(the newest 2000). With --follow, keep printing new lines until Ctrl+C.",
        epilog="examples:\n  edge-console logs --agent 192.168.1.20:50051 --level warning\n"
               "  edge-console logs --agent 192.168.1.20:50051 --follow",
        formatter_class=raw)
    common(logs, many=False)
    logs.add_argument("--tail", type=int, default=200, metavar="N",
                      help="the newest N lines first (default 200)")
    logs.add_argument("--level", default="", metavar="LEVEL",
                      help="only lines at or above: debug, info, warning, error, critical")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("--json", action="store_true",
                      help="print a JSON list of the lines; with --follow one JSON object per "
                           "line as it comes (JSON Lines)")


def cmd_doctor(args: argparse.Namespace, settings: Any, targets: list[str],
               stdout: Any) -> int:
    """Print each agent's findings; 1 when any check failed."""
    import json

    from rich.table import Table

    from console.commands import connect
    from edge_agent.client.types import to_jsonable

    reports = []
    for target in targets:
        with connect(target, settings, args.token_file) as client:
            reports.append((target, client.info().name, client.doctor()))
    if args.json:
        print(json.dumps([{"agent": t, "name": n, **to_jsonable(r)} for t, n, r in reports],
                         indent=2))
        return 0 if all(r.ok for _, _, r in reports) else 1
    for target, name, report in reports:
        table = Table(title=f"{name} {target}: " + ("no check failed" if report.ok else
                                                    "a check FAILED"), title_justify="left")
        for col in ("area", "check", "status", "detail", "what to do"):
            table.add_column(col)
        for f in report.findings:
            color = _STATUS_COLORS.get(f.status)
            table.add_row(f.area, f.check, f"[{color}]{f.status}[/]" if color else f.status,
                          f.detail, f.fix)
        stdout.print(table)
    return 0 if all(r.ok for _, _, r in reports) else 1


def _log_json(ln: Any) -> dict[str, Any]:
    return {"seq": ln.seq, "ts": ln.ts, "level": ln.level, "logger": ln.logger,
            "message": ln.message}


def cmd_logs(args: argparse.Namespace, settings: Any, targets: list[str], stdout: Any) -> int:
    """Print the agent's log lines (following until interrupted with --follow)."""
    import json

    from console.commands import connect
    from edge_agent.errors import AgentError

    if len(targets) != 1:
        raise AgentError("edge-console logs reads one agent: give one --agent")
    if args.tail < 0:
        raise AgentError(f"--tail must be >= 0, got {args.tail}")
    with connect(targets[0], settings, args.token_file) as client:
        lines = client.logs(tail=args.tail, min_level=args.level, follow=args.follow)
        try:
            if args.json and not args.follow:  # one document
                print(json.dumps([_log_json(ln) for ln in lines], indent=2))
                return 0
            for ln in lines:
                if args.json:  # --follow: a stream, one object per line
                    print(json.dumps(_log_json(ln)), flush=True)
                    continue
                stamp = time.strftime("%H:%M:%S", time.localtime(ln.ts))
                color = _LEVEL_COLORS.get(ln.level)
                level = f"[{color}]{ln.level:<8}[/]" if color else f"{ln.level:<8}"
                stdout.print(f"{stamp} {level} [dim]{ln.logger}[/]: ", end="")
                stdout.print(ln.message, markup=False, highlight=False)
                sys.stdout.flush()
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
    return 0
