"""Command line of edge-agent: ``serve`` the models in a state directory, ``add-bundle``."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from edge_agent.errors import AgentError
from edge_agent.management import cli_extras
from edge_agent.state.lock import PRIVATE_UMASK
from packager.pipes import quiet_on_broken_pipe

if TYPE_CHECKING:
    from edge_agent.config import AgentConfig
    from edge_agent.core.api import DataPlaneAPI
    from edge_agent.server import BoundAddresses
    from packager.bundle.reader import BundleReader

#: Commands that create files in the state directory (they run with umask 077).
WRITERS = ("serve", "add-bundle", "token")

EPILOG = textwrap.dedent("""\
    examples:
      # put a signed bundle in place, then serve it on the Unix socket and 127.0.0.1:8001
      edge-agent add-bundle --state-dir /var/lib/edge-agent --pubkey keys/edge-pack.pub \\
          mlp-3-x86_64-cpu-onnxruntime.edgepkg
      edge-agent serve --state-dir /var/lib/edge-agent

      # any free TCP port, no Unix socket, batching overrides from a file
      edge-agent serve --state-dir ./state --grpc 127.0.0.1:0 --no-uds --config agent.toml

      # call it (KServe v2 / Triton gRPC): examples/infer_grpc.py, examples/infer_tritonclient.py

    layout: STATE_DIR/models/NAME/VERSION/ holds one extracted bundle per model version;
    serve loads every version found there and answers for the newest unless asked.
    """)

SERVE_HELP = textwrap.dedent("""\
    Serve every model version in STATE_DIR/models/NAME/VERSION/ over KServe v2 gRPC
    (tritonclient.grpc works unmodified) plus the standard grpc.health.v1 service.
    Prints one line when ready; SIGTERM or Ctrl-C drains in-flight requests and exits 0.
    Flags override agent.toml. A missing STATE_DIR is created (mode 0700); one agent per
    STATE_DIR (a second is refused, naming the PID that holds STATE_DIR/agent.lock).""")

SERVE_EPILOG = textwrap.dedent("""\
    examples:
      edge-agent serve --state-dir /var/lib/edge-agent
      edge-agent serve --state-dir ./state --grpc 0.0.0.0:8001 --uds /run/edge/infer.sock
      edge-agent serve --config /etc/edge-agent/agent.toml
      edge-agent serve --state-dir ./state --http 8000   # + KServe HTTP/REST, /metrics

    agent.toml (every key optional except state_dir when --state-dir is not given):
      state_dir = "/var/lib/edge-agent"
      [grpc]
      address = "127.0.0.1:8001"     # "" = no TCP
      uds = "/run/edge-agent/inference.sock"
      max_message_bytes = 67108864
      [models.mlp]
      max_queue_delay_us = 500
      instances = 2
      max_queue_size = 64
    """)

ADD_HELP = textwrap.dedent("""\
    Verify a bundle (fits this device as a deploy requires, signature by a trusted key, every
    file hash) and extract it safely into STATE_DIR/models/NAME/VERSION/. Refuses an existing
    version unless --replace. Refused while an agent serves STATE_DIR: deploy to a running
    agent with edge-console deploy.""")

ADD_EPILOG = textwrap.dedent("""\
    examples:
      edge-agent add-bundle --state-dir ./state --pubkey keys/edge-pack.pub \\
          mlp-1-x86_64-cpu-openvino.edgepkg
      edge-agent add-bundle --state-dir ./state --allow-unsigned --replace dev.edgepkg
    """)


def build_parser() -> argparse.ArgumentParser:
    """The edge-agent argument parser."""
    parser = argparse.ArgumentParser(
        prog="edge-agent",
        description="Serve model bundles on this device over KServe v2 gRPC.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-level", default="WARNING",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="log verbosity on stderr (default: WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    serve = sub.add_parser("serve", help="serve the models in a state directory",
                           description=SERVE_HELP,
                           epilog=SERVE_EPILOG + "\n" + cli_extras.SERVE_FLAGS_EPILOG,
                           formatter_class=raw)
    serve.add_argument("--state-dir", type=Path, help="agent state directory (holds models/)")
    serve.add_argument("--config", type=Path, metavar="AGENT_TOML",
                       help="agent.toml; flags given here override it")
    serve.add_argument("--grpc", metavar="HOST:PORT",
                       help="TCP listener (default 127.0.0.1:8001; port 0 = any free port; "
                            "'none' = no TCP)")
    serve.add_argument("--uds", type=Path, metavar="PATH",
                       help="Unix socket path (default STATE_DIR/run/inference.sock)")
    serve.add_argument("--no-uds", action="store_true", help="do not listen on a Unix socket")
    serve.add_argument("--max-message-bytes", type=int, metavar="N",
                       help="largest request/response accepted (default 64 MiB)")
    serve.add_argument("--http", metavar="HOST:PORT",
                       help="also serve KServe v2 HTTP/REST and Prometheus /metrics here "
                            "(off by default; a bare PORT means 127.0.0.1:PORT; docs/http.md)")
    cli_extras.add_serve_flags(serve)

    add = sub.add_parser("add-bundle", help="verify and install a bundle into a state directory",
                         description=ADD_HELP, epilog=ADD_EPILOG, formatter_class=raw)
    add.add_argument("--state-dir", type=Path, required=True, help="agent state directory")
    add.add_argument("bundle", type=Path, help="the .edgepkg file")
    add.add_argument("--pubkey", type=Path, action="append", default=[], metavar="KEY",
                     help="trusted Ed25519 public key (PEM); repeatable")
    add.add_argument("--allow-unsigned", action="store_true",
                     help="accept a bundle without a (checkable) signature; hashes still checked")
    add.add_argument("--replace", action="store_true",
                     help="replace the version if it is already installed")
    cli_extras.add_subcommands(sub)
    from edge_agent.perf.flags import add_perf_parser, add_tune_parser

    add_perf_parser(sub)
    add_tune_parser(sub)
    return parser


def cmd_serve(args: argparse.Namespace) -> int:
    """``edge-agent serve``."""
    from edge_agent.agent import serve
    from edge_agent.config import load_config
    from edge_agent.management.tls import describe_tls

    flags = dict(config=args.config, state_dir=args.state_dir, grpc_address=args.grpc,
                 uds=args.uds, no_uds=args.no_uds, max_message_bytes=args.max_message_bytes,
                 management=cli_extras.management_flag_values(args), http_address=args.http,
                 fleet=cli_extras.fleet_flag_values(args))
    config = load_config(flags.pop("config"), **flags)
    # A missing state directory is created (0700) when the agent locks it, before any write.

    def ready(addresses: BoundAddresses, dataplane: DataPlaneAPI) -> None:
        entries = dataplane.repository_index()
        models = ", ".join(f"{e.name}:{e.version}({e.state})" for e in entries) or "none"
        listen = ", ".join(addresses.targets())
        mgmt = (f"management on {addresses.management}; "
                f"{describe_tls(config.management, config.state_dir)}"
                if addresses.management else "management off")
        http = f"HTTP on {addresses.http}; " if addresses.http else ""
        print(f"edge-agent ready: listening on {listen}; {mgmt}; {http}models: {models}",
              flush=True)

    def reload() -> AgentConfig:  # SIGHUP: the file again, with the same flags on top
        return load_config(args.config, **flags)

    return serve(config, on_ready=ready, reload=reload if args.config else None)


def cmd_add_bundle(args: argparse.Namespace) -> int:
    """``edge-agent add-bundle``: the deploy's compatibility and signature checks, then an
    atomic install, with the state directory locked (refused while an agent serves it)."""
    from edge_agent.deploy.compat import check_fits
    from edge_agent.deploy.device import detect_device
    from edge_agent.state.lock import claim_state_dir
    from packager.bundle.reader import open_bundle

    if not args.bundle.is_file():
        raise AgentError(f"bundle {args.bundle} does not exist")
    if not args.pubkey and not args.allow_unsigned:
        raise AgentError("give --pubkey KEY to verify the bundle's signature, or "
                         "--allow-unsigned to accept it without one")
    with open_bundle(args.bundle) as bundle:
        m = bundle.manifest
        check_fits(m, detect_device())  # the rule (and message) deploy applies
        bundle.verify(trusted_keys=args.pubkey, allow_unsigned=args.allow_unsigned)
        signed = "signed" if bundle.signed else "unsigned"
        with claim_state_dir(args.state_dir, role="add-bundle"):
            target, existed = _install(bundle, args.state_dir, replace=args.replace)
    print(f"{'replaced' if existed else 'installed'} {m.name} version {m.version} "
          f"({m.profile}, {m.backend}, {signed}) at {target}")
    return 0


def _install(bundle: BundleReader, state_dir: Path, *, replace: bool) -> tuple[Path, bool]:
    """Extract ``bundle`` to STATE_DIR/models/NAME/VERSION (swapping it in when ``replace``);
    returns the target and whether a version was replaced."""
    m = bundle.manifest
    model_dir = state_dir / "models" / m.name
    target = model_dir / str(m.version)
    existed = target.exists()
    if existed and not replace:
        raise AgentError(f"{m.name} version {m.version} is already installed at {target}; "
                         "pass --replace to overwrite it")
    incoming = model_dir / f".{m.version}.incoming"
    shutil.rmtree(incoming, ignore_errors=True)  # left over from an interrupted run
    staged = bundle.extract(incoming if existed else target)
    if existed:
        old = model_dir / f".{m.version}.old"
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
        staged.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    return target, existed


_NEEDS_AGENT = ("serve", "metrics", "check", "perf")
"""Commands that need edgeship[agent]; the others run in any installation."""


def cmd_perf(args: argparse.Namespace) -> int:
    from edge_agent.perf.cli import cmd_perf as run

    return run(args)


def cmd_tune(args: argparse.Namespace) -> int:
    from packager.extras import refusal

    if refused := refusal("agent", "edge-agent tune") or refusal("tune", "edge-agent tune"):
        print(f"edge-agent tune: error: {refused}", file=sys.stderr)
        return 1
    from edge_agent.perf.tune_cli import cmd_tune as run

    return run(args)


@quiet_on_broken_pipe
def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``edge-agent`` command: one clear line and exit 1 on failure."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # `import openvino` forks a helper; with gRPC threads running, gRPC's fork handlers would
    # only log a warning. The agent never forks a child that uses gRPC, so turn them off.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    # stderr (the journal) gets --log-level; the in-memory ring that `edge-console logs` reads
    # keeps INFO and up as well (deploys, swaps, rollbacks), so the root logger passes INFO on
    root = logging.getLogger()
    if root.level > logging.INFO:
        for handler in root.handlers:
            handler.setLevel(root.level)
        root.setLevel(logging.INFO)
    if args.command is None:
        parser.print_help()
        return 2
    from packager.bundle.errors import PackagerError
    from packager.extras import refusal

    if args.command in _NEEDS_AGENT and (
            refused := refusal("agent", f"edge-agent {args.command}")):
        print(f"edge-agent {args.command}: error: {refused}", file=sys.stderr)
        return 1
    handlers = {"serve": cmd_serve, "add-bundle": cmd_add_bundle, "perf": cmd_perf,
                "tune": cmd_tune, **cli_extras.HANDLERS}
    # Whatever the caller's umask: the state, its databases and models are private (restored
    # on return for callers that run main() in their own process, such as tests).
    umask = os.umask(PRIVATE_UMASK) if args.command in WRITERS else None
    try:
        return handlers[args.command](args)
    except (AgentError, PackagerError) as exc:
        print(f"edge-agent {args.command}: error: {exc}", file=sys.stderr)
    except BrokenPipeError:
        raise  # the reader of stdout went away: quiet_on_broken_pipe ends it
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        print(f"edge-agent {args.command}: error:{where}: {exc.strerror or exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"edge-agent {args.command}: interrupted", file=sys.stderr)
    finally:
        if umask is not None:
            os.umask(umask)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
