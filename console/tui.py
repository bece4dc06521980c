"""``edge-console`` / ``edge-console ui``: start the terminal UI (its own options)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from console.commands import read_token
from console.config import BrokerSettings, load_settings
from console.errors import ConsoleError
from console.flags import add_mdns_flags

EPILOG = textwrap.dedent("""\
    keys (k9s/lazydocker habits): / filter, ? help, : jump to a view, l events, d details,
    Enter open an agent, D deploy, r rollback, h history, Ctrl+P every action, q quit.

    examples:
      edge-console                                   # browse every interface, poll every 2 s
      edge-console ui --mdns-interface 192.168.1.20 --read-only
      edge-console ui --no-mdns --agent 10.0.0.7:50051 --token-file pi.token
      edge-console ui --broker mqtts://broker:8883 --fleet-group cams   # + a fleet's agents
    """)


def build_tui_parser() -> argparse.ArgumentParser:
    """Options of the terminal UI."""
    p = argparse.ArgumentParser(
        prog="edge-console ui", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The terminal UI: agents found by mDNS (and --agent / config entries), "
                    "live; deploy with a canary, roll back, watch metrics.", epilog=EPILOG)
    p.add_argument("--agent", action="append", default=[], metavar="HOST:PORT",
                   help="also list this agent (management address); repeatable")
    p.add_argument("--config", type=Path, metavar="TOML",
                   help="console config file (default ~/.config/edge-console/config.toml)")
    p.add_argument("--token-file", type=Path, metavar="F",
                   help="management token for agents the config file has no token for")
    add_mdns_flags(p, no_mdns_help="do not browse mDNS")
    p.add_argument("--read-only", action="store_true",
                   help="hide every action that changes an agent (deploy, rollback, remove)")
    p.add_argument("--poll", type=float, metavar="S", help="seconds between polls (default 2)")
    p.add_argument("--soak", type=float, metavar="S",
                   help="how long a canary must stay healthy before the rest (default 30)")
    p.add_argument("--accept-new", action="store_true",
                   help="pin the certificate of agents seen for the first time (else they "
                        "show as not trusted, with their fingerprint)")
    p.add_argument("--insecure", action="store_true",
                   help="talk plaintext to agents started with --insecure (no TLS)")
    p.add_argument("--bundle-dir", type=Path, metavar="DIR",
                   help="where the deploy file picker starts (default: current directory)")
    p.add_argument("--broker", metavar="URL",
                   help="also list the agents of a fleet's MQTT broker (mqtts://HOST[:PORT]; "
                        "credentials from the config file's [fleet] table)")
    p.add_argument("--fleet-group", metavar="NAME",
                   help="only this fleet group's agents (default: every group)")
    return p


def run_tui(argv: list[str] | None = None) -> int:
    """Parse the UI's options and run it until the operator quits; 1 on a setup error."""
    from dataclasses import replace

    args = build_tui_parser().parse_args(argv)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("edge-console ui: error: the terminal UI needs a terminal; in scripts use the "
              "subcommands (edge-console --help)", file=sys.stderr)
        return 2
    try:
        settings = load_settings(args.config).with_overrides(
            agents=args.agent, interfaces=args.mdns_interface or None,
            discovery=False if args.no_mdns else None, read_only=args.read_only,
            token=read_token(args.token_file) if args.token_file else None,
            insecure=args.insecure, accept_new=args.accept_new)
        if args.poll is not None:
            settings = replace(settings, poll_interval_s=max(0.2, args.poll))
        if args.soak is not None:
            settings = replace(settings, canary_soak_s=max(0.0, args.soak))
        if args.bundle_dir is not None:
            settings = replace(settings, bundle_dir=args.bundle_dir)
        if args.broker or args.fleet_group:
            broker = settings.broker or BrokerSettings(args.broker or "")
            if not (args.broker or broker.url):
                raise ConsoleError("--fleet-group needs --broker (or [fleet] broker in the "
                                   "config file)")
            settings = replace(settings, broker=replace(
                broker, url=args.broker or broker.url, group=args.fleet_group or broker.group))
    except ConsoleError as exc:
        print(f"edge-console ui: error: {exc}", file=sys.stderr)
        return 1
    from console.app import EdgeConsoleApp

    EdgeConsoleApp(settings).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(run_tui())
