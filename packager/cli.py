"""``edge-pack``: the command line over packager's library (build, inspect, verify, keys)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packager import __version__
from packager.bundle.errors import PackagerError
from packager.extras import refusal
from packager.pipes import quiet_on_broken_pipe

if TYPE_CHECKING:
    from packager.bundle.manifest import SequenceConfig

_EPILOG_MAIN = """\
examples:
  edge-pack sample mlp --out model.onnx         # a seeded sample model to try the tools
  edge-pack keygen --out keys/
  edge-pack profiles
  edge-pack build model.onnx --name resnet --version 3 \\
      --profile x86_64-cpu-openvino --profile jetson-orin-tensorrt \\
      --key keys/edge-pack.key --dynamic-batch --out dist/
  edge-pack inspect dist/resnet-3-x86_64-cpu-openvino.edgepkg
  edge-pack verify dist/resnet-3-x86_64-cpu-openvino.edgepkg --pubkey keys/edge-pack.pub
  edge-pack push dist/resnet-3-*.edgepkg oci://registry.local:5000/models/resnet:3
  edge-pack pull oci://registry.local:5000/models/resnet:3 --out pulled/
"""

_EPILOG_BUILD = """\
One bundle per profile is written as OUT/NAME-VERSION-PROFILE.edgepkg and its path printed.
Versions are positive integers; the agent orders versions by them (rollback goes to the
previous one). Nothing is written to OUT unless every profile builds and passes parity.
A bundle already in OUT with the same file name is replaced when it was built from the same
source (the same model file, or spec and code files: a rebuild); one built from another
source is refused (two models must not share a name and version) unless --overwrite.

examples:
  edge-pack build mlp.onnx --name mlp --version 1 --profile x86_64-cpu-onnxruntime --out dist/
  edge-pack build squeezenet.onnx --name squeezenet --version 2 --dynamic-batch --max-batch 16 \\
      --profile x86_64-cpu-openvino --profile arm64-cpu-onnxruntime-int8 \\
      --key keys/edge-pack.key --out dist/
  edge-pack build cnn.onnx --name cnn --version 1 --calibration-data calib.npz \\
      --profile x86_64-cpu-openvino-int8 --profile x86_64-cpu-onnxruntime-int8 --out dist/
  edge-pack build forest.json --name forest --version 1 --profile x86_64-cpu-onnxruntime \\
      --out dist/                         # an XGBoost model (LightGBM .txt, sklearn .skops)
"""

_EPILOG_VERIFY = """\
Checks every file's sha256 against the manifest and, with --pubkey, the Ed25519 signature of
manifest.json. Any changed byte fails with a message naming what differs (exit code 1).

examples:
  edge-pack verify dist/mlp-1-x86_64-cpu-onnxruntime.edgepkg --pubkey keys/edge-pack.pub
  edge-pack verify dist/mlp-1-x86_64-cpu-onnxruntime.edgepkg          # hashes only
"""


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="edge-pack", formatter_class=fmt, epilog=_EPILOG_MAIN,
        description="Turn one ONNX model into signed, versioned, parity-checked bundles, "
                    "one per device profile.")
    p.add_argument("--version", action="version", version=f"edge-pack {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    k = sub.add_parser("keygen", help="write an Ed25519 signing key pair",
                       formatter_class=fmt, description="Write DIR/edge-pack.key (private, "
                       "mode 0600) and DIR/edge-pack.pub (give this one to agents).",
                       epilog="example:\n  edge-pack keygen --out keys/\n")
    k.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory for keys")

    b = sub.add_parser("build", help="convert a model and write one bundle per profile",
                       formatter_class=fmt, epilog=_EPILOG_BUILD,
                       description="Validate MODEL, convert it per profile, check numerical "
                                   "parity, and write signed bundles.")
    b.add_argument("model", type=Path, metavar="MODEL",
                   help="the source ONNX model; a tree model (XGBoost .json/.ubj, LightGBM "
                        ".txt, scikit-learn saved with skops .skops; needs the [trees] extra; "
                        "docs/quantization.md); or a model spec SPEC.toml (a Python model or "
                        "a pipeline; docs/bundle-format.md)")
    b.add_argument("--name", help="model name (letters, digits, _ . -); required for ONNX, "
                                  "optional for a spec (must repeat the spec's name)")
    b.add_argument("--requires", action="append", default=[], metavar="DIST",
                   help="MODULE:FUNCTION only: a distribution the function needs on the "
                        "device (repeatable; never guessed from the environment)")
    b.add_argument("--version", required=True, dest="model_version", metavar="N",
                   help="model version, a positive integer")
    b.add_argument("--profile", required=True, action="append", dest="profiles", metavar="P",
                   help="device profile (repeat for several; see `edge-pack profiles`)")
    b.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory")
    b.add_argument("--key", type=Path, metavar="PRIVATE_KEY",
                   help="Ed25519 private key to sign with (unsigned bundles are marked so)")
    b.add_argument("--dynamic-batch", action="store_true",
                   help="turn a fixed leading batch dim of 1 into a dynamic one")
    b.add_argument("--max-batch", metavar="N", help="override the profile's max batch size")
    b.add_argument("--response-cache", action="store_true",
                   help="the model opts into the agent's response cache by default (agents "
                   "with a [response_cache] budget answer repeated requests from it; "
                   "[models.NAME] response_cache in agent.toml overrides)")
    b.add_argument("--labels", action="append", default=[], metavar="[OUTPUT=]FILE",
                   help="class labels of an output, one per line (repeat per output; FILE "
                   "alone for a single-output model): the agent answers classification "
                   "requests with them and ModelConfig shows them as label_filename")
    b.add_argument("--input-format", action="append", default=[], dest="input_formats",
                   metavar="NAME=NCHW|NHWC",
                   help="the layout of image input NAME (three dims besides the batch dim), "
                        "reported in ModelConfig as Triton's FORMAT_NCHW/FORMAT_NHWC; "
                        "repeatable; a spec sets input_formats itself")
    b.add_argument("--sequence", choices=("direct", "oldest"),
                   help="a stateful model: requests carry sequence_id/start/end and every "
                        "request of a sequence goes to one slot in arrival order (Triton's "
                        "sequence batcher strategies; direct refuses a new sequence when no "
                        "slot is free, oldest makes it wait)")
    b.add_argument("--max-sequence-idle-us", metavar="US",
                   help="a sequence idle this long is released (default 1000000)")
    b.add_argument("--max-candidate-sequences", metavar="N",
                   help="slots: sequences live at once (default 64)")
    b.add_argument("--control-input", action="append", default=[], dest="control_inputs",
                   metavar="KIND=NAME:DATATYPE",
                   help="a model input the agent fills per request of a sequence: KIND is "
                        "START, END, READY (INT32/FP32/BOOL: 1 or 0) or CORRID (UINT64, "
                        "INT64, UINT32, INT32 or BYTES: the sequence id); repeatable")
    b.add_argument("--state", action="append", default=[], dest="states",
                   metavar="INPUT:OUTPUT",
                   help="implicit state of a stateful model: the agent feeds INPUT with what "
                        "OUTPUT answered to the sequence's request before (zeros at START); "
                        "repeatable")
    b.add_argument("--allow-parity-failure", action="store_true",
                   help="write bundles even when parity is past the profile's tolerance")
    b.add_argument("--member", action="append", default=[], type=Path, metavar="BUNDLE",
                   help="a pipeline spec's step model bundle (repeatable): its wiring is "
                        "checked against it now, not only at deploy")
    b.add_argument("--reference-data", type=Path, metavar="FILE.npz",
                   help="real inputs (one array per model input, by name) to store as the "
                        "reference data devices check parity on (default: seeded inputs)")
    b.add_argument("--calibration-data", type=Path, metavar="FILE.npz|DIR",
                   help="representative inputs (an .npz with one array per model input, by "
                        "name, leading dim = samples; or a directory of NAME.npy): int8 "
                        "profiles are statically quantized on them and checked on a held-out "
                        "fifth (docs/quantization.md)")
    b.add_argument("--overwrite", action="store_true",
                   help="replace bundles in OUT with the same name, version and profile even "
                        "when they were built from another source (a rebuild from the same "
                        "source replaces them without it)")
    b.add_argument("--quiet", action="store_true", help="no progress display")

    sp = sub.add_parser("spec", help="print the model spec of a bound Python function",
                        formatter_class=fmt,
                        description="Import MODULE and print the TOML spec (kind = \"python\", "
                                    "PyTriton's calling) of FUNCTION's @signature "
                                    "(edge_agent.inline): `edge-pack build MODULE:FUNCTION` "
                                    "builds the same.",
                        epilog="example:\n  edge-pack spec classifier.py:classify --name "
                               "zero_shot --requires numpy\n")
    sp.add_argument("target", metavar="MODULE:FUNCTION",
                    help="a .py file (or a module name under the current directory) and the "
                         "function in it")
    sp.add_argument("--name", help="model name (default: the function's name)")
    sp.add_argument("--requires", action="append", default=[], metavar="DIST",
                    help="a distribution the function needs on the device (repeatable; "
                         "never guessed)")

    i = sub.add_parser("inspect", help="show a bundle's manifest", formatter_class=fmt,
                       epilog="examples:\n  edge-pack inspect dist/mlp-1-x86_64-cpu-openvino."
                              "edgepkg\n  edge-pack inspect BUNDLE --json | jq .parity\n")
    i.add_argument("bundle", type=Path, metavar="BUNDLE")
    i.add_argument("--json", action="store_true", help="print the manifest as JSON")

    v = sub.add_parser("verify", help="check a bundle's file hashes and signature",
                       formatter_class=fmt, epilog=_EPILOG_VERIFY)
    v.add_argument("bundle", type=Path, metavar="BUNDLE")
    v.add_argument("--pubkey", type=Path, action="append", default=[], metavar="KEY",
                   help="trusted Ed25519 public key (repeatable); required for signed bundles "
                        "to count as verified")

    pr = sub.add_parser("profiles", help="list the device profiles", formatter_class=fmt,
                        epilog="examples:\n  edge-pack profiles\n  edge-pack profiles --json\n")
    pr.add_argument("--json", action="store_true", help="print the profiles as JSON")
    from packager.registry_cli import add_registry_commands

    add_registry_commands(sub, fmt)
    from packager.samples_cli import add_sample_command

    add_sample_command(sub, fmt)
    return p


def _positive_int(text: str | None, what: str) -> int | None:
    from packager.bundle.errors import UsageError

    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what} {text!r} must be a positive integer") from None
    if value < 1:
        raise UsageError(f"{what} {text!r} must be a positive integer")
    return value


def _input_format_flags(flags: list[str]) -> dict[str, str]:
    from packager.bundle.errors import BundleError, UsageError
    from packager.bundle.input_format import parse_input_format_flags

    try:
        return parse_input_format_flags(flags)
    except BundleError as exc:
        raise UsageError(str(exc)) from None


def _sequence_flags(args: argparse.Namespace) -> SequenceConfig | None:
    """The --sequence flags as a SequenceConfig (None: not a stateful model)."""
    from packager.bundle.errors import BundleError, UsageError
    from packager.bundle.manifest import ControlInput, SequenceConfig, StateSpec

    if args.sequence is None:
        if (args.max_sequence_idle_us or args.max_candidate_sequences or args.control_inputs
                or args.states):
            raise UsageError("--max-sequence-idle-us, --max-candidate-sequences, "
                             "--control-input and --state apply to a stateful model: add "
                             "--sequence direct or --sequence oldest")
        return None
    controls = []
    for flag in args.control_inputs:
        kind, _, rest = flag.partition("=")
        name, _, datatype = rest.rpartition(":")
        if not name or not datatype:
            raise UsageError(f"--control-input {flag!r} must be KIND=NAME:DATATYPE, e.g. "
                             "START=START:INT32")
        controls.append(ControlInput(kind.upper(), name, datatype.upper()))
    extra: dict[str, int] = {}
    for key in ("max_sequence_idle_us", "max_candidate_sequences"):
        value = _positive_int(getattr(args, key), f"--{key.replace('_', '-')}")
        if value is not None:
            extra[key] = value
    states = []
    for flag in args.states:
        given, _, answered = flag.partition(":")
        if not given or not answered:
            raise UsageError(f"--state {flag!r} must be INPUT:OUTPUT, e.g. STATE_IN:STATE_OUT")
        states.append(StateSpec(given, answered))
    try:
        return SequenceConfig(strategy=args.sequence, control_inputs=tuple(controls),
                              states=tuple(states), **extra)
    except BundleError as exc:
        raise UsageError(str(exc)) from None


def _cmd_keygen(args: argparse.Namespace) -> int:
    from packager.bundle.signing import generate_keypair

    priv, pub = generate_keypair(args.out)
    print(f"private key: {priv}  (keep it secret; pass it to `edge-pack build --key`)")
    print(f"public key:  {pub}  (give it to agents and to `edge-pack verify --pubkey`)")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from packager.build import build_bundles, check_version
    from packager.labels import parse_label_args

    version = check_version(args.model_version)
    from packager.function_spec import is_function_target

    if is_function_target(str(args.model)):
        return _build_function(args, version)
    if args.requires:
        from packager.bundle.errors import UsageError

        raise UsageError("--requires applies to MODULE:FUNCTION (a spec lists its requires)")
    if args.name is None and args.model.suffix != ".toml":
        from packager.bundle.errors import UsageError

        raise UsageError("--name is required when building from an ONNX model")
    max_batch = _positive_int(args.max_batch, "--max-batch")
    kwargs = dict(name=args.name, version=version, profiles=args.profiles, out_dir=args.out,
                  key_path=args.key, dynamic_batch=args.dynamic_batch, max_batch=max_batch,
                  allow_parity_failure=args.allow_parity_failure,
                  reference_data=args.reference_data,
                  calibration_data=args.calibration_data, response_cache=args.response_cache,
                  overwrite=args.overwrite, labels=parse_label_args(args.labels),
                  input_formats=_input_format_flags(args.input_formats),
                  sequence=_sequence_flags(args))
    from rich.console import Console

    console = Console(stderr=True)
    if args.member and args.model.suffix != ".toml":
        from packager.bundle.errors import UsageError

        raise UsageError("--member applies to a pipeline spec (SPEC.toml), not to an ONNX model")
    if args.model.suffix == ".toml":
        from packager.spec_build import build_spec_bundles

        if (args.dynamic_batch or max_batch is not None or args.allow_parity_failure
                or args.reference_data is not None or args.calibration_data is not None
                or args.response_cache or args.labels or args.input_formats
                or kwargs["sequence"] is not None):
            from packager.bundle.errors import UsageError

            raise UsageError("--dynamic-batch, --max-batch, --allow-parity-failure, "
                             "--reference-data, --calibration-data, --response-cache, "
                             "--labels, --input-format and --sequence apply to ONNX models; a "
                             "spec sets max_batch_size itself (and input_formats and sequence) "
                             "and has no parity check")
        paths = build_spec_bundles(args.model, name=args.name, version=version,
                                   profiles=args.profiles, out_dir=args.out, key_path=args.key,
                                   members=args.member, overwrite=args.overwrite)
    elif args.quiet or not console.is_terminal:
        paths = build_bundles(args.model, **kwargs)
    else:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                      transient=True) as progress:
            paths = build_bundles(args.model, progress=progress, **kwargs)
    for p in paths:
        print(p)
    if max_batch is not None and paths and args.model.suffix != ".toml" \
            and not _batched(paths[0]):
        print(f"warning: --max-batch {max_batch} has no effect: the batch dimension of "
              f"{args.model.name} is fixed, so the agent runs one request per execution; "
              "rebuild with --dynamic-batch to let it batch requests", file=sys.stderr)
    if args.calibration_data is None and (convs := _dynamic_int8_convs(args.model, paths)):
        print(f"warning: {args.model.name} has {convs} Conv nodes and its int8 bundles use "
              "dynamic quantization, which runs CNNs slower than fp32; pass "
              "--calibration-data for static int8 (docs/quantization.md)", file=sys.stderr)
    if args.key is None and paths and _carries_code(paths[0]):
        print("warning: the bundles carry Python code and are unsigned: every agent refuses "
              "them, even with --allow-unsigned (pass --key to sign them)", file=sys.stderr)
    elif args.key is None:
        print("note: bundles are unsigned (pass --key to sign them)", file=sys.stderr)
    return 0


def _dynamic_int8_convs(model: Path, bundles: Sequence[Path]) -> int:
    """Conv nodes of ``model`` when some bundle is dynamically quantized int8, else 0."""
    from packager.bundle.reader import open_bundle

    dynamic = False
    for b in bundles:
        with open_bundle(b) as reader:
            opts = reader.manifest.backend_options.get("onnxruntime", {})
            dynamic = dynamic or opts.get("quantization") == "dynamic-int8"
    if not dynamic or model.suffix != ".onnx":
        return 0
    import onnx

    return sum(n.op_type == "Conv" for n in onnx.load(str(model)).graph.node)


def _carries_code(bundle: Path) -> bool:
    """Whether a built bundle carries code (a Python model), which agents run only signed."""
    from packager.bundle.reader import carries_code, open_bundle

    with open_bundle(bundle) as reader:
        return carries_code(reader.manifest)


def _batched(bundle: Path) -> bool:
    """Whether a built bundle's model has a dynamic batch dimension."""
    from packager.bundle.reader import open_bundle

    with open_bundle(bundle) as reader:
        return reader.manifest.batching.max_batch_size > 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from packager.bundle.reader import open_bundle

    with open_bundle(args.bundle) as reader:
        m, signed = reader.manifest, reader.signed
    if args.json:
        print(json.dumps({"signed": signed, "manifest": m.to_dict()}, indent=2, sort_keys=True))
        return 0
    from packager.inspect_view import render_manifest

    render_manifest(m, signed, args.bundle)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from packager.bundle.reader import open_bundle

    with open_bundle(args.bundle) as reader:
        reader.verify_files()
        n = len(reader.manifest.files)
        if args.pubkey:
            kid = reader.verify_signature(args.pubkey)
            print(f"OK: {args.bundle}: {n} files match the manifest; signature valid "
                  f"(key {kid})")
        elif reader.signed:
            reader.verify_signature(allow_unsigned=True)  # canonical manifest check
            print(f"OK: {args.bundle}: {n} files match the manifest; signed, but the "
                  "signature was NOT checked (pass --pubkey KEY)")
        else:
            reader.verify_signature(allow_unsigned=True)
            print(f"OK: {args.bundle}: {n} files match the manifest; the bundle is UNSIGNED")
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from packager.bundle.profiles import list_profiles

    profiles = list_profiles()
    if args.json:
        import dataclasses

        rows = [{k: (str(v) if isinstance(v, Path) else v)
                 for k, v in dataclasses.asdict(p).items()} for p in profiles]
        print(json.dumps(rows, indent=2, default=list))
        return 0
    from packager.inspect_view import render_profiles

    render_profiles(profiles)
    return 0


def _cmd_sample(args: argparse.Namespace) -> int:
    from packager.samples_cli import run

    return run(args)


def _build_function(args: argparse.Namespace, version: int) -> int:
    from packager.function_spec import build_function_bundles

    only_onnx = [flag for flag, given in (
        ("--dynamic-batch", args.dynamic_batch), ("--max-batch", args.max_batch),
        ("--member", args.member), ("--labels", args.labels),
        ("--response-cache", args.response_cache)) if given]
    if only_onnx:
        from packager.bundle.errors import UsageError

        raise UsageError(f"{', '.join(only_onnx)} do not apply to MODULE:FUNCTION: its "
                         "@signature sets the tensors and max_batch_size")
    paths = build_function_bundles(str(args.model), name=args.name, version=version,
                                   profiles=args.profiles, out_dir=args.out, key_path=args.key,
                                   requires=args.requires, overwrite=args.overwrite)
    for path in paths:
        print(path)
    return 0


def _cmd_spec(args: argparse.Namespace) -> int:
    from packager.function_spec import find_function, spec_text

    print(spec_text(find_function(args.target), args.name, args.requires), end="")
    return 0


def _cmd_registry(args: argparse.Namespace) -> int:
    from packager.registry_cli import run

    return run(args)


_COMMANDS = {"keygen": _cmd_keygen, "build": _cmd_build, "inspect": _cmd_inspect,
             "verify": _cmd_verify, "profiles": _cmd_profiles, "push": _cmd_registry,
             "pull": _cmd_registry, "sample": _cmd_sample, "spec": _cmd_spec}


@quiet_on_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``edge-pack`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "build" and (refused := refusal("pack", "edge-pack build")):
        print(f"edge-pack: error: {refused}", file=sys.stderr)
        return 1
    try:
        return _COMMANDS[args.command](args)
    except PackagerError as exc:
        if getattr(args, "json", False):  # a script reading stdout gets the error there too
            print(json.dumps({"error": {"code": exc.code.value, "message": str(exc)}}))
        print(f"edge-pack: error: {exc} [{exc.code.value}]", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # the reader of stdout went away: quiet_on_broken_pipe ends it
    except OSError as exc:  # disk full, permissions: still one clear line
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"edge-pack: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("edge-pack: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
