"""Command line of edge-console (the TUI and the scripting subcommands arrive with later work)."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    """The edge-console argument parser."""
    return argparse.ArgumentParser(
        prog="edge-console",
        description="Find edge agents on the LAN by mDNS, deploy and roll back bundles, and "
        "watch live metrics. (The terminal UI and the scripting subcommands are not built yet.)",
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``edge-console`` command."""
    build_parser().parse_args(argv)
    build_parser().print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
