"""Command line of edge-console: the terminal UI (no subcommand, or ``ui``) and the scripting
subcommands for CI and scripts, which drive the same client code.

Every subcommand exits 0 on success and 1 with one clear line on stderr on failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.errors import ConsoleConfigError, ConsoleError
from console.flags import add_mdns_flags
from packager.pipes import quiet_on_broken_pipe

if TYPE_CHECKING:
    from console.config import ConsoleSettings
    from edge_agent.client.types import DeploymentInfo

EPILOG = textwrap.dedent("""\
    examples:
      edge-console agents --timeout 3                       # find agents on the LAN (mDNS)
      edge-console status --agent 192.168.1.20:50051 --token-file pi.token
      edge-console deploy out/mlp-2-*.edgepkg --agent 192.168.1.20:50051 \\
          --agent 192.168.1.21:50051 --canary 192.168.1.20:50051
      edge-console rollback mlp --agent 192.168.1.20:50051 --to-version 1
      edge-console remove mlp --version 1 --agent 192.168.1.20:50051   # free its disk space
      edge-console settings mlp --agent 192.168.1.20:50051 --set instances=2   # live

    tokens: on each device `edge-agent token --state-dir DIR` prints the agent's management
    token (and its certificate fingerprint); pass the token with --token-file F, or put it in
    the console config file (~/.config/edge-console/config.toml):

      [[agents]]
      address = "192.168.1.20:50051"
      token_file = "~/tokens/pi.token"

      [tokens]                      # by agent id, name or HOST:PORT
      default = "..."

    TLS: the first contact with an agent shows its certificate fingerprint and, once you
    accept it (yes on a terminal, or --accept-new), pins it in
    ~/.config/edge-console/known_agents; a changed certificate is refused.
    """)

NO_TERMINAL = ("edge-console: the terminal UI needs a terminal; in scripts use the "
               "subcommands above")


def _common(p: argparse.ArgumentParser, *, many: bool = True, required: bool = True) -> None:
    p.add_argument("--agent", action="append", default=[], required=required,
                   metavar="HOST:PORT",
                   help="an agent's management address" + ("; repeatable" if many else ""))
    p.add_argument("--token-file", type=Path, metavar="F",
                   help="file holding the management token (else the console config)")
    p.add_argument("--config", type=Path, metavar="TOML",
                   help="console config file (default ~/.config/edge-console/config.toml)")
    p.add_argument("--accept-new", action="store_true",
                   help="pin the certificate of an agent seen for the first time without "
                        "asking (scripts); a changed certificate is still refused")
    p.add_argument("--insecure", action="store_true",
                   help="talk plaintext to agents started with --insecure (no TLS)")


def build_parser() -> argparse.ArgumentParser:
    """The edge-console argument parser."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="edge-console",
        description="Find edge agents on the LAN by mDNS, deploy and roll back bundles, and "
                    "inspect them. With no subcommand (or `ui`, see `edge-console ui --help`) "
                    "it opens the terminal UI; the subcommands are for CI and scripts.",
        epilog=EPILOG, formatter_class=raw)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    agents = sub.add_parser("agents", help="list agents found by mDNS (plus --agent entries)",
                            description="Browse the LAN for _edge-agent._tcp for --timeout "
                                        "seconds; --agent entries are asked directly.",
                            formatter_class=raw)
    _common(agents, required=False)
    agents.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_mdns_flags(agents, no_mdns_help="do not browse; only ask the --agent entries")
    agents.add_argument("--timeout", type=float, default=3.0, metavar="S",
                        help="seconds to browse (default 3)")

    status = sub.add_parser("status", help="an agent's info, model versions and history",
                            formatter_class=raw)
    _common(status)
    status.add_argument("--json", action="store_true", help="print JSON")

    deploy = sub.add_parser(
        "deploy", help="deploy bundles to agents (each gets the bundle built for it)",
        description="Upload and deploy each model in BUNDLE... to every --agent. Several "
                    "bundles of one model version (one per profile) may be given: each agent "
                    "gets the one for its profile, else one that fits its arch and runtimes. "
                    "With --canary the canary goes first and a failure there stops the rest.",
        formatter_class=raw)
    deploy.add_argument("bundles", nargs="+", metavar="BUNDLE",
                        help="bundle files, or one oci://HOST[:PORT]/REPO:TAG reference: the "
                             "console resolves it to a digest and each agent pulls the bundle "
                             "for its profile from the registry itself")
    _common(deploy)
    deploy.add_argument("--registry-insecure", action="store_true",
                        help="resolve the oci:// reference over plain HTTP (a lab registry; "
                             "agents need it in their [registry] insecure too)")
    deploy.add_argument("--registry-config", type=Path, metavar="FILE",
                        help="docker-style config.json with registry credentials for resolving "
                             "(default: $DOCKER_CONFIG/config.json or ~/.docker/config.json; "
                             "agents use their own)")
    deploy.add_argument("--registry-ca", type=Path, metavar="PEM",
                        help="trust this CA bundle for the registry's TLS certificate when "
                             "resolving (agents: [registry] ca_file)")
    deploy.add_argument("--canary", metavar="HOST:PORT",
                        help="deploy here first; stop if it fails")
    deploy.add_argument("--force", action="store_true",
                        help="reload a version that is already active")
    deploy.add_argument("--json", action="store_true", help="print JSON results")

    rollback = sub.add_parser(
        "rollback", formatter_class=raw,
        help="switch a model back to the version active before the current one (never to a "
             "version it was rolled back from)")
    rollback.add_argument("model")
    _common(rollback)
    rollback.add_argument("--to-version", type=int, metavar="N",
                          help="the version to go back to (default: the version active before "
                               "the current one, skipping versions rolled back from)")
    rollback.add_argument("--dry-run", action="store_true",
                          help="show where each agent would roll back to, change nothing")
    rollback.add_argument("--json", action="store_true", help="print JSON results")

    remove = sub.add_parser(
        "remove", help="delete an inactive model version from agents' disks",
        description="Unload and delete MODEL version N on every --agent, without asking "
                    "(scripts; the terminal UI asks first). The active version is refused: "
                    "roll back or deploy another version first. Exits 1 if any agent refused.",
        epilog="example:\n  edge-console remove mlp --version 1 --agent 192.168.1.20:50051 "
               "--token-file pi.token",
        formatter_class=raw)
    remove.add_argument("model")
    remove.add_argument("--version", type=int, required=True, metavar="N",
                        help="the version to delete (not the active one)")
    _common(remove)
    remove.add_argument("--json", action="store_true", help="print JSON results")

    from console import diagnostics_cli

    diagnostics_cli.add_parsers(sub, _common, raw)

    from console.settings_cmd import add_parser as add_settings_parser

    add_settings_parser(sub, _common)

    from console.fleet_cli import add_parser as add_fleet_parser

    add_fleet_parser(sub)
    sub.add_parser("ui", help="the terminal UI (the default; see edge-console ui --help)",
                   add_help=False)
    return parser


def _targets(args: argparse.Namespace) -> list[str]:
    from console.commands import parse_target

    return [parse_target(a) for a in args.agent]


def _settings(args: argparse.Namespace) -> ConsoleSettings:
    from dataclasses import replace

    from console.config import load_settings
    from console.known_agents import ask_on_terminal

    settings = load_settings(args.config).with_overrides(insecure=args.insecure,
                                                         accept_new=args.accept_new)
    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    return replace(settings, ask_new=ask_on_terminal) if interactive else settings


UNLIMITED_WIDTH = 10_000  # rich's width when stdout is not a terminal: tables are never cut


def _stdout() -> Any:  # rich.console.Console
    """Rich output on stdout: the terminal's width, or no limit when piped or redirected."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=UNLIMITED_WIDTH)


def _dump(data: Any) -> None:
    from edge_agent.client.types import to_jsonable

    print(json.dumps(to_jsonable(data), indent=2, default=str))


def _dump_model_reports(reports: Any) -> None:
    """Reports of a rollback or a removal: what they name is a model, and says so."""
    from edge_agent.client.types import to_jsonable

    rows = to_jsonable(reports)
    _dump([{("model" if k == "bundle" else k): v for k, v in r.items()} for r in rows])


def cmd_agents(args: argparse.Namespace) -> int:
    from rich.table import Table

    from console.commands import list_agents

    settings = _settings(args)  # [discovery] interfaces from the config, as the UI reads them
    rows = list_agents(_targets(args), settings, args.token_file,
                       interfaces=args.mdns_interface or settings.interfaces,
                       timeout_s=args.timeout, browse=not args.no_mdns)
    if args.json:
        _dump(rows)
        return 0
    table = Table(title=f"{len(rows)} agent(s)", title_justify="left")
    for col in ("name", "address", "arch", "profile", "models", "source", "id"):
        table.add_column(col)
    for r in rows:
        name = r.name or ("[red]unreachable[/]" if r.reachable is False else "?")
        table.add_row(name, r.address, r.arch, r.profile, r.models, r.source, r.id[:12])
    _stdout().print(table)
    for r in rows:
        if r.error:
            print(f"{r.address}: {r.error}", file=sys.stderr)
    return 1 if any(r.reachable is False for r in rows) else 0


def cmd_status(args: argparse.Namespace) -> int:
    from rich.table import Table

    from console.agent_view import cache_cell
    from console.commands import agent_status

    settings = _settings(args)
    statuses = [agent_status(t, settings, args.token_file) for t in _targets(args)]
    if args.json:
        _dump(statuses)
        return 0
    console = _stdout()
    cut = console.is_terminal  # long errors and reasons are shortened on a terminal only
    for s in statuses:
        i = s.info
        console.print(f"[bold]{i.name}[/] {s.address}  id {i.agent_id[:12]}  {i.arch}  "
                      f"profile {i.profile}  runtimes {', '.join(i.runtimes)}  "
                      f"agent {i.agent_version}  up {i.uptime_s:.0f} s")
        console.print(f"memory: {i.memory_used_bytes / 2**20:.0f} MiB loaded"
                      + (f" of a {i.memory_budget_bytes / 2**20:.0f} MiB budget"
                         if i.memory_budget_bytes else " (no memory budget)"))
        table = Table(title="model versions", title_justify="left")
        for col in ("model", "version", "active", "state", "backend", "load ms", "RSS MiB",
                    "load", "loads/unloads", "waits (mean ms)", "response cache",
                    "cancelled", "sequences", "parity on device", "error"):
            table.add_column(col)
        parity = {(p.model, p.version): p.figures for p in s.parity}
        for v in s.versions:
            table.add_row(v.model, str(v.version), "*" if v.active else "", v.state,
                          v.backend, "-" if v.load_ms is None else f"{v.load_ms:.0f}",
                          "-" if v.rss_delta_bytes is None
                          else f"{v.rss_delta_bytes / 2**20:+.1f}",
                          v.load_mode + (" pinned" if v.pinned else ""),
                          f"{v.loads}/{v.unloads}",
                          f"{v.load_waits} ({v.load_wait_ms / v.load_waits:.0f})"
                          if v.load_waits else "-", cache_cell(v),
                          str(v.cancelled_requests) if v.cancelled_requests else "-",
                          f"{v.sequences_active}/{v.sequence_slots}"
                          if v.sequence_slots else "-",
                          parity.get((v.model, v.version), "-"),
                          v.load_error[:60] if cut else v.load_error)
        console.print(table)
        for t in s.tuning:
            console.print(f"last tuning of {t.model}: {t.summary}")
        console.print(deployments_table(s.deployments, cut=cut))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from console.diagnostics_cli import cmd_doctor as run

    return run(args, _settings(args), _targets(args), _stdout())


def cmd_logs(args: argparse.Namespace) -> int:
    from console.diagnostics_cli import cmd_logs as run

    return run(args, _settings(args), _targets(args), _stdout())


def deployments_table(deployments: list[DeploymentInfo], *, cut: bool = True) -> Any:
    """A rich table of deployment history (used by status and the demo); ``cut`` shortens
    long reasons (for a terminal)."""
    from rich.table import Table

    table = Table(title="deployments", title_justify="left")
    for col in ("id", "model", "kind", "from", "to", "status", "when", "reason"):
        table.add_column(col)
    for d in deployments:
        color = {"committed": "green", "failed": "red", "interrupted": "yellow"}.get(d.status,
                                                                                      "")
        table.add_row(str(d.id), d.model, d.kind, _v(d.from_version), _v(d.to_version),
                      f"[{color}]{d.status}[/]" if color else d.status,
                      time.strftime("%H:%M:%S", time.localtime(d.started_at)),
                      d.reason[:70] if cut else d.reason)
    return table


def _v(v: int | None) -> str:
    return "-" if v is None else str(v)


def _print_step(target: str, step: Any) -> None:
    mark = "ok " if step.ok else "FAILED"
    print(f"{target}  {step.step:<9} {mark} {step.message}", flush=True)


def cmd_deploy(args: argparse.Namespace) -> int:
    from console.commands import deploy, parse_target

    targets = _targets(args)
    canary = parse_target(args.canary) if args.canary else None
    quiet = args.json
    shown: dict[str, int] = {}
    refs = [b for b in args.bundles if b.startswith("oci://")]
    pulled = bool(refs)

    def progress(target: str, got: int, total: int) -> None:  # every quarter of a big upload
        quarter = got * 4 // total if total else 4
        if total >= 4 << 20 and quarter > shown.get(target, 0):
            shown[target] = quarter
            what = "pull    " if pulled else "upload  "
            print(f"{target}  {what}  {got / 2**20:.1f} of {total / 2**20:.1f} MiB",
                  flush=True)

    try:
        if refs:
            from console.commands import deploy_reference

            if len(args.bundles) != 1:
                raise ConsoleConfigError("give either bundle files or one oci:// reference")
            reports = deploy_reference(
                refs[0], targets, _settings(args), args.token_file, canary=canary,
                force=args.force, insecure_registry=args.registry_insecure,
                registry_config=args.registry_config, registry_ca=args.registry_ca,
                on_step=None if quiet else _print_step, on_progress=None if quiet else progress)
        else:
            reports = deploy([Path(b) for b in args.bundles], targets, _settings(args),
                             args.token_file, canary=canary, force=args.force,
                             on_step=None if quiet else _print_step,
                             on_progress=None if quiet else progress)
    except ConsoleError as exc:
        if quiet:
            _dump(getattr(exc, "reports", []))
        raise
    if quiet:
        _dump(reports)
    else:
        for r in reports:
            what = r.skipped or (r.result.message if r.result else r.error)
            print(f"{r.agent}: {r.bundle}: {what}")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from console.commands import rollback

    def show(agent: str, line: str) -> None:  # before anything changes
        print(f"{agent}: {'would roll back' if args.dry_run else 'rolling back'} {line}",
              flush=True)

    try:
        reports = rollback(args.model, _targets(args), _settings(args), args.token_file,
                           args.to_version, dry_run=args.dry_run,
                           preview=None if args.json else show)
    except ConsoleError as exc:
        if args.json:
            _dump_model_reports(getattr(exc, "reports", []))
        raise
    if args.json:
        _dump_model_reports(reports)
    else:
        for r in reports:
            if r.result is not None:
                print(f"{r.agent}: {r.result.message}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from console.commands import remove

    try:
        reports = remove(args.model, args.version, _targets(args), _settings(args),
                         args.token_file)
    except ConsoleError as exc:
        if args.json:
            _dump_model_reports(getattr(exc, "reports", []))
        raise
    if args.json:
        _dump_model_reports(reports)
    else:
        for r in reports:
            assert r.result is not None
            print(f"{r.agent}: {r.result.message}")
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    from console.settings_cmd import cmd_settings as run

    return run(args, _targets(args), _settings(args))


def cmd_fleet(args: argparse.Namespace) -> int:
    from console.fleet_cli import cmd_fleet as run

    return run(args)


@quiet_on_broken_pipe
def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``edge-console`` command."""
    from packager.extras import refusal

    argv = sys.argv[1:] if argv is None else argv
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    # the command about to run (none for --help and the like, which run everywhere)
    command = (argv[0] if not argv[0].startswith("-") else None) if argv else (
        "ui" if interactive else None)
    wants_help = any(a in ("-h", "--help") for a in argv)
    if command and not wants_help and (refused := refusal("console", f"edge-console {command}")):
        print(f"edge-console {command}: error: {refused}", file=sys.stderr)
        return 1
    if (argv and argv[0] == "ui") or (not argv and interactive):
        from console.tui import run_tui  # the terminal UI (its own options)

        return run_tui(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # no terminal: teach instead of failing
        parser.print_help()
        print(f"\n{NO_TERMINAL}")
        return 0
    from edge_agent.errors import AgentError

    handlers = {"agents": cmd_agents, "status": cmd_status, "deploy": cmd_deploy,
                "rollback": cmd_rollback, "remove": cmd_remove, "doctor": cmd_doctor,
                "logs": cmd_logs, "settings": cmd_settings, "fleet": cmd_fleet}
    try:
        return handlers[args.command](args)
    except (ConsoleError, AgentError) as exc:
        print(f"edge-console {args.command}: error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"edge-console {args.command}: interrupted", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
