"""``edge-console settings MODEL``: show or change a model's live settings on agents.

With no ``--set``/``--unset``/``--revert`` it prints each setting, its value and where it comes
from. A change goes through the agent's hot-swap path (warm-up, probe, switch, drain), is
recorded in the deployment history as a ``settings`` change and kept across restarts.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from console.errors import ConsoleError, DeploymentFailedError

EXAMPLES = """examples:
  edge-console settings mlp --agent 192.168.1.20:50051              # show
  edge-console settings mlp --agent 192.168.1.20:50051 --set instances=2 \\
      --set preferred_batch_sizes=[4,8] --set max_queue_delay_us=500
  edge-console settings mlp --agent 192.168.1.20:50051 --unset instances  # back to agent.toml
  edge-console settings mlp --agent 192.168.1.20:50051 --revert     # undo the last change

values are TOML literals (4, [1, 2], true, "process"); a bare word is a string."""


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``key=value`` strings as a dict; ConsoleError naming a malformed one."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConsoleError(f"--set {item!r}: expected KEY=VALUE (e.g. instances=2)")
        out[key.strip()] = value.strip()
    return out


def add_parser(sub: Any, common: Any) -> None:
    """Register the ``settings`` subcommand (``common`` adds --agent, --token-file, ...)."""
    p = sub.add_parser(
        "settings", help="show or change a model's live settings (instances, batching, ...)",
        description=__doc__, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    common(p)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting to change (repeatable)")
    p.add_argument("--unset", action="append", default=[], metavar="KEY",
                   help="a live setting to drop: back to agent.toml's value (repeatable)")
    p.add_argument("--replace", action="store_true",
                   help="drop every live setting not given with --set")
    p.add_argument("--revert", action="store_true",
                   help="go back to the settings before the last settings change")
    p.add_argument("--json", action="store_true", help="print JSON")


def change_settings(model: str, agents: Sequence[str], settings: Any, token_file: Path | None,
                    values: dict[str, str], unset: Sequence[str], *, replace: bool,
                    revert: bool) -> list[Any]:
    """Apply one change on every agent in turn; DeploymentFailedError when any failed."""
    from console.commands import DeployReport, connect
    from edge_agent.client.agent_client import ManagementError

    reports = []
    for target in agents:
        try:
            with connect(target, settings, token_file) as c:
                result = c.set_model_settings(model, values, unset, replace=replace,
                                              revert=revert)
                reports.append(DeployReport(target, model, result))
        except ManagementError as exc:
            reports.append(DeployReport(target, model, None, str(exc)))
    failed = [r for r in reports if not r.ok]
    if failed:
        why = failed[0].error or (failed[0].result.message if failed[0].result else "")
        raise DeploymentFailedError(f"settings change of {model} failed on "
                                    f"{failed[0].agent}: {why}", reports)
    return reports


def cmd_settings(args: argparse.Namespace, targets: list[str], settings: Any) -> int:
    """Run ``edge-console settings``."""
    from console.commands import connect
    from edge_agent.client.types import to_jsonable

    values = parse_assignments(args.set)
    if not (values or args.unset or args.revert or args.replace):
        from rich.console import Console
        from rich.table import Table

        shown = []
        for target in targets:
            with connect(target, settings, args.token_file) as c:
                rows = c.model_settings(args.model)
            shown.append({"agent": target, "settings": to_jsonable(rows)})
            if not args.json:
                table = Table(title=f"{target}: {args.model}", title_justify="left")
                for col in ("setting", "value", "source"):
                    table.add_column(col)
                for r in rows:
                    table.add_row(r.key, r.value or "-", r.source)
                Console().print(table)
        if args.json:
            print(json.dumps(shown, indent=2))
        return 0
    if args.revert and (values or args.unset):
        raise ConsoleError("--revert takes no --set or --unset")
    reports = change_settings(args.model, targets, settings, args.token_file, values,
                              args.unset, replace=args.replace, revert=args.revert)
    if args.json:
        print(json.dumps(to_jsonable(reports), indent=2, default=str))
    else:
        for r in reports:
            print(f"{r.agent}: {r.result.message}")
    return 0
