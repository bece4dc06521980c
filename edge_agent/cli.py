"""Command line of edge-agent."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    """The edge-agent argument parser."""
    return argparse.ArgumentParser(
        prog="edge-agent",
        description="Serve model bundles on this device over KServe v2 gRPC.",
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``edge-agent`` command."""
    build_parser().parse_args(argv)
    build_parser().print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
