"""The management part of the edge-agent command line: serve's management flags, and the
``token``, ``metrics``, ``install-service``, ``check`` and ``doctor`` subcommands
(``edge_agent.cli`` wires them)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from edge_agent.errors import AgentError

UNLIMITED_WIDTH = 10_000  # rich's width when stdout is not a terminal (no wrapping, no cuts)

SERVE_FLAGS_EPILOG = textwrap.dedent("""\
    management (agent.toml sections [management], [mdns], [metrics]; see
    docs/management-api.md):
      [management]
      address = "0.0.0.0:50051"      # --management; unset = no management API
      name = "line-3"                # --name
      trust = ["edge-pack.pub"]      # --trust (repeatable)
      allow_unsigned = false         # --allow-unsigned
      insecure = false               # --insecure (default: TLS, self-signed in STATE_DIR/tls)
      tls_cert = "agent.pem"         # your own certificate instead (and tls_key)
      tls_client_ca = "ca.pem"       # mTLS: client certificates replace the token
      keep_versions = 3
      [mdns]
      interfaces = ["192.168.1.20"]  # --mdns-interface (repeatable); enabled = false: --no-mdns
      [metrics]
      enabled = true                 # --no-metrics
      [registry]                     # deploy by reference (docs/registry.md)
      allow = ["registry.local:5000/models"]  # --registry-allow (repeatable; added to these)
      insecure = ["registry.local:5000"]      # plain HTTP (--registry-insecure)
      auth_file = "registry-auth.json"        # --registry-auth-file
      ca_file = "factory-ca.pem"              # --registry-ca-file
    SIGHUP re-reads agent.toml, with these flags on top again (trust, allow_unsigned,
    retention, watch settings, [registry]): no restart to allow a registry.
    """)


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """The management flags of ``edge-agent serve``."""
    g = serve.add_argument_group("management")
    g.add_argument("--management", metavar="HOST:PORT",
                   help="turn on the management API (and the mDNS advert) on HOST:PORT, e.g. "
                        "0.0.0.0:50051 (port 0 = any free port; default: off). TLS with the "
                        "agent's own certificate (created in STATE_DIR/tls/); every call needs "
                        "the token. `edge-agent token` prints both the token and the "
                        "certificate's fingerprint")
    g.add_argument("--insecure", action="store_true",
                   help="serve the management API in plaintext (no TLS): the token crosses "
                        "the network in the clear. Consoles must pass --insecure too")
    g.add_argument("--name", help="the agent's name in the console and mDNS (default: host)")
    g.add_argument("--trust", type=Path, action="append", default=[], metavar="PUBKEY",
                   help="public key (PEM) whose signed bundles may be deployed; repeatable")
    g.add_argument("--allow-unsigned", action="store_true",
                   help="accept bundles without a signature (hashes are still checked)")
    g.add_argument("--mdns-interface", action="append", default=[], metavar="IP",
                   help="IPv4 address of an interface to advertise on; repeatable "
                        "(default: all)")
    g.add_argument("--no-mdns", action="store_true", help="do not advertise over mDNS")
    g.add_argument("--no-metrics", action="store_true",
                   help="do not record metrics (no metrics.db, no WatchMetrics samples)")
    g.add_argument("--profile", help="the device profile to report (default: detected)")
    r = serve.add_argument_group("registry (deploy by reference; [registry] in agent.toml)")
    r.add_argument("--registry-allow", action="append", default=[],
                   metavar="HOST[:PORT][/PREFIX]",
                   help="pull bundles from this registry (repositories under PREFIX; all "
                        "without one); repeatable, added to [registry] allow. Without any "
                        "entry every deploy by reference is refused")
    r.add_argument("--registry-insecure", action="store_true",
                   help="talk plain HTTP (no TLS) to the registries of --registry-allow "
                        "(a lab registry)")
    r.add_argument("--registry-ca-file", type=Path, metavar="PEM",
                   help="trust this CA bundle for registries' TLS certificates "
                        "([registry] ca_file; default: the system's CAs)")
    r.add_argument("--registry-auth-file", type=Path, metavar="FILE",
                   help="registry credentials: a docker-style config.json "
                        "([registry] auth_file)")
    f = serve.add_argument_group("fleet through an MQTT broker ([fleet] in agent.toml; "
                                 "docs/fleet.md)")
    f.add_argument("--fleet-broker", metavar="URL",
                   help="follow a signed desired state from this broker (mqtts://HOST:8883; "
                        "[fleet] broker)")
    f.add_argument("--fleet-group", metavar="NAME", help="the fleet group ([fleet] group)")


def management_flag_values(args: argparse.Namespace) -> dict[str, object]:
    """The serve flags as keyword arguments of :func:`edge_agent.config.management_sections`."""
    return {"address": args.management, "name": args.name, "trust": args.trust,
            "allow_unsigned": args.allow_unsigned, "mdns_interfaces": args.mdns_interface,
            "no_mdns": args.no_mdns, "no_metrics": args.no_metrics, "profile": args.profile,
            "insecure": args.insecure, "registry_allow": args.registry_allow,
            "registry_insecure": args.registry_insecure,
            "registry_ca_file": args.registry_ca_file,
            "registry_auth_file": args.registry_auth_file}


def fleet_flag_values(args: argparse.Namespace) -> dict[str, object]:
    """The serve flags laid over ``[fleet]`` (None: not given)."""
    return {"broker": args.fleet_broker, "group": args.fleet_group}


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``token``, ``metrics`` and ``install-service``."""
    raw = argparse.RawDescriptionHelpFormatter
    token = sub.add_parser("token", help="print the management token and certificate "
                                         "fingerprint of a state directory",
                           description="Print the management API token (created on the "
                                       "agent's first start, STATE_DIR/management.token, mode "
                                       "0600) on stdout, or write it to a 0600 file with "
                                       "--out, and the SHA-256 fingerprint of the agent's TLS "
                                       "certificate (STATE_DIR/tls/cert.pem) on stderr. Give "
                                       "the token to edge-console with --token-file; compare "
                                       "the fingerprint with the one edge-console shows at "
                                       "first contact.",
                           epilog="examples:\n"
                                  "  edge-agent token --state-dir /var/lib/edge-agent "
                                  "--out pi.token   # mode 0600\n"
                                  "  edge-agent token --state-dir /var/lib/edge-agent | "
                                  "ssh laptop 'umask 077; cat > pi.token'\n"
                                  "  edge-agent token --state-dir /var/lib/edge-agent "
                                  "--fingerprint\n"
                                  "(`> FILE` creates FILE with your umask, usually readable by "
                                  "everyone: use --out)",
                           formatter_class=raw)
    token.add_argument("--state-dir", type=Path, required=True, help="agent state directory")
    token.add_argument("--rotate", action="store_true",
                       help="replace the token with a new one and print it; a running agent "
                            "refuses the old token from its next call (no restart; safe "
                            "beside it: the file is replaced atomically)")
    token.add_argument("--fingerprint", action="store_true",
                       help="print only the certificate fingerprint (on stdout)")
    token.add_argument("--out", type=Path, metavar="FILE",
                       help="write the token to FILE (mode 0600, replaced atomically; a "
                            "symlink is refused) instead of stdout")

    metrics = sub.add_parser("metrics", help="print a summary table of recent metrics",
                             description="Read STATE_DIR/metrics.db (safe while the agent "
                                         "runs) and print per model version requests, errors, "
                                         "batch size and latency percentiles.",
                             formatter_class=raw)
    metrics.add_argument("--state-dir", type=Path, required=True,
                         help="agent state directory")
    metrics.add_argument("--window", type=int, default=60, metavar="S",
                         help="seconds to summarize (default 60)")
    metrics.add_argument("--json", action="store_true",
                         help="print the points (and the latest system sample) as JSON")

    svc = sub.add_parser("install-service", help="install the systemd unit (Type=notify)",
                         description="Render systemd/edge-agent.service for this executable "
                                     "and config file, write it to the unit directory and run "
                                     "systemctl daemon-reload. Then: systemctl enable --now "
                                     "edge-agent.",
                         formatter_class=raw)
    svc.add_argument("--config", type=Path, required=True, metavar="AGENT_TOML",
                     help="the agent.toml the service runs with (absolute path)")
    svc.add_argument("--executable", type=Path,
                     help="the edge-agent executable (default: the one on PATH / this one)")
    svc.add_argument("--user", help="run as this system user (default: a DynamicUser)")
    svc.add_argument("--gpu", action="store_true", help="allow GPU device nodes (Jetson)")
    svc.add_argument("--unit-dir", type=Path, default=Path("/etc/systemd/system"),
                     help="where to write the unit (default /etc/systemd/system)")
    svc.add_argument("--print", action="store_true", dest="print_only",
                     help="print the unit instead of installing it")
    _add_check(sub, raw)


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               raw: type[argparse.HelpFormatter]) -> None:
    check = sub.add_parser(
        "check", help="run a bundle's parity check on this device (no agent needed)",
        description="Verify BUNDLE, load it on the runtime this device would serve it with, "
                    "run its reference inputs and compare with the source model's outputs "
                    "stored at build time, within the profile's tolerance (the deploy "
                    "pipeline's parity step, offline). A bundle built for another device "
                    "(another arch, or a runtime this device lacks) is refused as a deploy "
                    "refuses it: run the check on that device. Exit 0 when it agrees (or "
                    "carries no reference data), 1 when it disagrees, cannot run or is for "
                    "another device.",
        epilog="examples:\n  edge-agent check mlp-2-arm64-cpu-onnxruntime.edgepkg "
               "--trust release.pub\n  edge-agent check BUNDLE --json | jq .max_abs_error",
        formatter_class=raw)
    check.add_argument("bundle", type=Path, metavar="BUNDLE")
    check.add_argument("--trust", type=Path, action="append", default=[], metavar="PUBLIC_KEY",
                       help="check the signature against this key (repeatable)")
    check.add_argument("--backend", help="run on this backend instead of the bundle's choice")
    check.add_argument("--json", action="store_true", help="print the report as JSON")

    doctor = sub.add_parser(
        "doctor", help="what this device is and can run, and what to fix",
        description="Check this device: architecture, CPU features the runtimes use, memory, "
                    "installed runtimes with their execution providers and devices, NVIDIA "
                    "GPU / Jetson (CUDA, TensorRT, pycuda, power mode), the profile the agent "
                    "would report, and with --state-dir the state directory's health. "
                    "Read-only; safe beside a running agent. Exit 1 when a check fails.",
        epilog="examples:\n  edge-agent doctor\n  edge-agent doctor --state-dir "
               "/var/lib/edge-agent --json",
        formatter_class=raw)
    doctor.add_argument("--state-dir", type=Path, help="also check this agent state directory")
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")


def cmd_token(args: argparse.Namespace) -> int:
    """``edge-agent token [--rotate]``: the token, created if the agent never started here."""
    from edge_agent.state.token import load_or_create_token, rotate_token, write_private

    if not args.state_dir.is_dir():
        raise AgentError(f"state directory {args.state_dir} does not exist; start the agent "
                         "once or create it")
    from edge_agent.management.tls import fingerprint_of

    if args.fingerprint and args.out is not None:
        raise AgentError("--fingerprint prints the fingerprint only; --out writes the token: "
                         "give one of them")
    if args.out is not None and args.out.is_symlink():
        raise AgentError(f"{args.out} is a symbolic link; refusing to write the token through "
                         "it: give the path of a regular file")
    if args.out is not None and args.out.is_dir():
        raise AgentError(f"{args.out} is a directory; give the path of the token file")
    fp = fingerprint_of(args.state_dir)
    if args.fingerprint:
        print(fp)
        return 0
    token = rotate_token(args.state_dir) if args.rotate else load_or_create_token(args.state_dir)
    if args.out is None:
        print(token)
    else:
        write_private(args.out, token + "\n")
        print(f"token written to {args.out} (mode 0600)", file=sys.stderr)
    if args.rotate:
        print("the old token is no longer accepted; update the consoles' token files",
              file=sys.stderr)
    print(f"certificate fingerprint {fp}\n(edge-console shows it at the first contact: it "
          "must match; unless the agent runs with --insecure or its own tls_cert)",
          file=sys.stderr)
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    """``edge-agent metrics``: the summary table."""
    from rich.console import Console

    from edge_agent.metrics.summary import render_summary, summary_json

    if args.json:
        import json

        print(json.dumps(summary_json(args.state_dir, window_s=args.window), indent=2))
        return 0
    console = Console()
    if not console.is_terminal:  # piped: never cut the table to 80 columns
        console = Console(width=UNLIMITED_WIDTH)
    render_summary(args.state_dir, console, window_s=args.window)
    return 0


def cmd_install_service(args: argparse.Namespace) -> int:
    """``edge-agent install-service``."""
    import shutil

    from edge_agent.service import install_service, render_unit

    exe = args.executable or shutil.which("edge-agent")
    if exe is None:
        raise AgentError("cannot find the edge-agent executable on PATH; pass --executable")
    exe, config = Path(exe).resolve(), args.config.resolve()
    if args.print_only:
        sys.stdout.write(render_unit(exe, config, args.user, gpu=args.gpu))
        return 0
    path = install_service(exe, config, args.user, gpu=args.gpu, unit_dir=args.unit_dir)
    print(f"installed {path}; enable it with: systemctl enable --now edge-agent")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Print the parity check of one bundle on this device; 1 when it disagrees."""
    import json

    from edge_agent.offline_check import check_bundle

    result, verified = check_bundle(args.bundle, args.trust, backend=args.backend)
    if args.json:
        print(json.dumps({"passed": result.passed, "message": result.message,
                          "verified": verified, **(result.report or {})}, indent=2))
    else:
        word = {True: "PASSED", False: "FAILED", None: "NOT CHECKED"}[result.passed]
        print(f"{args.bundle.name}: {verified}")
        print(f"parity on this device {word}: {result.message}")
    return 1 if result.passed is False else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print every finding (a table, or JSON); 1 when any check failed."""
    import dataclasses
    import json

    from edge_agent.doctor import FAIL, WARN, failed, run_doctor

    findings = run_doctor(args.state_dir)
    if args.json:
        print(json.dumps({"ok": not failed(findings),
                          "findings": [dataclasses.asdict(f) for f in findings]}, indent=2))
        return 1 if failed(findings) else 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=UNLIMITED_WIDTH)
    table = Table(title="edge-agent doctor", title_justify="left")
    for col in ("area", "check", "status", "detail", "what to do"):
        table.add_column(col)
    colors = {FAIL: "red", WARN: "yellow", "ok": "green"}
    for f in findings:
        color = colors.get(f.status)
        table.add_row(f.area, f.check, f"[{color}]{f.status}[/]" if color else f.status,
                      f.detail, f.fix)
    console.print(table)
    bad = [f for f in findings if f.status == FAIL]
    console.print(f"{len(bad)} check(s) failed" if bad else "no check failed", markup=False)
    return 1 if bad else 0


HANDLERS = {"token": cmd_token, "metrics": cmd_metrics, "install-service": cmd_install_service,
            "check": cmd_check, "doctor": cmd_doctor}
