"""``edge-pack push`` and ``edge-pack pull``: bundles to and from an OCI registry."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from packager.bundle.errors import UsageError
from packager.bundle.oci.client import (
    Credentials,
    RegistryOptions,
    credentials_from_config,
    docker_config_path,
)
from packager.bundle.oci.ref import OciReference, parse_reference

_EPILOG_PUSH = """\
The bundles (one model version; one per profile) go to REF's tag as an OCI index with one
manifest per profile; an index already at the tag for the same version keeps its other
profiles. Credentials: --username with --password-stdin, else the registry's entry in
$DOCKER_CONFIG/config.json or ~/.docker/config.json (as `docker login` writes it).

examples:
  edge-pack push dist/mlp-1-*.edgepkg oci://registry.local:5000/models/mlp:1
  echo "$TOKEN" | edge-pack push dist/mlp-1-x86_64-cpu-onnxruntime.edgepkg \\
      oci://ghcr.io/acme/mlp:1 --username acme --password-stdin
  edge-pack push dist/mlp-1-*.edgepkg oci://127.0.0.1:5000/lab/mlp:1 --insecure   # plain HTTP
"""

_EPILOG_PULL = """\
Writes OUT/NAME-VERSION-PROFILE.edgepkg for every profile REF holds (or --profile's); every
digest is checked, and each bundle's manifest must be the one its OCI manifest names.

examples:
  edge-pack pull oci://registry.local:5000/models/mlp:1 --out pulled/
  edge-pack pull oci://registry.local:5000/models/mlp@sha256:... --profile x86_64-cpu-openvino \\
      --out pulled/
"""


def _registry_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--insecure", action="store_true",
                   help="plain HTTP (a lab registry); TLS is the default")
    p.add_argument("--username", metavar="USER", help="registry user (with --password-stdin)")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password or token from standard input")
    p.add_argument("--registry-config", type=Path, metavar="FILE",
                   help="docker-style config.json with the credentials (default: "
                        "$DOCKER_CONFIG/config.json or ~/.docker/config.json)")
    p.add_argument("--ca-file", type=Path, metavar="PEM",
                   help="trust this CA bundle for the registry's TLS certificate (a private "
                        "CA) instead of the system's")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the result")


def add_registry_commands(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Register ``push`` and ``pull`` on edge-pack's subparsers."""
    push = sub.add_parser("push", help="push bundles to an OCI registry", formatter_class=fmt,
                          epilog=_EPILOG_PUSH,
                          description="Push the bundles of one model version to an OCI "
                                      "registry as an artifact (oci://HOST[:PORT]/REPO:TAG).")
    push.add_argument("items", nargs="+", metavar="BUNDLE... REF")
    _registry_flags(push)
    pull = sub.add_parser("pull", help="pull bundles from an OCI registry",
                          formatter_class=fmt, epilog=_EPILOG_PULL,
                          description="Pull the bundles REF names into --out.")
    pull.add_argument("ref", metavar="REF")
    pull.add_argument("--out", type=Path, required=True, metavar="DIR")
    pull.add_argument("--profile", metavar="NAME", help="only this profile's bundle")
    _registry_flags(pull)


def registry_options(args: argparse.Namespace, ref: OciReference) -> RegistryOptions:
    """Options from the flags: credentials from --username/--password-stdin, else the
    docker config."""
    creds: Credentials | None = None
    if args.password_stdin or args.username:
        if not (args.password_stdin and args.username):
            raise UsageError("--username and --password-stdin go together")
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise UsageError("--password-stdin: standard input gave no password")
        creds = Credentials(args.username, password)
    else:
        path = args.registry_config or docker_config_path()
        creds = credentials_from_config(path, ref.registry,
                                        required=args.registry_config is not None)
    if args.ca_file is not None and not args.ca_file.is_file():
        raise UsageError(f"--ca-file: {args.ca_file} is not a file")
    return RegistryOptions(insecure=args.insecure, credentials=creds, ca_file=args.ca_file)


def run(args: argparse.Namespace) -> int:
    """Run ``push`` or ``pull``."""
    from packager.bundle.oci.transfer import pull_bundles, push_bundles

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr)

    if args.command == "push":
        if len(args.items) < 2:
            raise UsageError("give the bundles and then the reference: edge-pack push "
                             "BUNDLE... oci://HOST[:PORT]/REPO:TAG")
        ref = parse_reference(args.items[-1])
        bundles = [Path(p) for p in args.items[:-1]]
        result = push_bundles(bundles, ref, registry_options(args, ref))
        for b in result.bundles:
            how = "uploaded" if b.uploaded else "already in the registry"
            say(f"{b.path.name}: {b.info.profile}, {b.size} bytes {how} ({b.blob_digest})")
        say(f"{ref}: index over {', '.join(result.profiles)}")
        print(result.reference.pinned())
        return 0
    ref = parse_reference(args.ref)
    paths = pull_bundles(ref, args.out, registry_options(args, ref), profile=args.profile)
    for p in paths:
        print(p)
    return 0
