"""Command-line flags that several edge-console commands share (one spelling everywhere)."""

from __future__ import annotations

import argparse


def add_mdns_flags(p: argparse.ArgumentParser, *, no_mdns_help: str) -> None:
    """--mdns-interface and --no-mdns, spelled as edge-agent serve spells them, on every
    command that browses (the old --interface and --no-discovery stay as hidden aliases)."""
    p.add_argument("--mdns-interface", action="append", default=[], metavar="IP",
                   help="IPv4 address of an interface to browse on; repeatable (default: all)")
    p.add_argument("--interface", action="append", dest="mdns_interface",
                   help=argparse.SUPPRESS)
    p.add_argument("--no-mdns", action="store_true", help=no_mdns_help)
    p.add_argument("--no-discovery", action="store_true", dest="no_mdns",
                   help=argparse.SUPPRESS)
