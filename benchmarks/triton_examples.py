"""Run Triton's own example clients, unmodified, against an agent and print what passes.

    python -m benchmarks.triton_examples EXAMPLES_DIR [--strict] [--timeout S] [--workdir DIR]
    (scripts/triton-examples.sh EXAMPLES_DIR does the same)

EXAMPLES_DIR is ``src/python/examples`` of triton-inference-server/client (not part of this
project: fetch it, e.g. ``git archive``). The script builds with ``edge-pack`` the models the
examples expect (``packager/triton_samples.py``: ``simple``, ``simple_int8``, ``simple_string``,
``simple_identity``, ``custom_identity_int32``, ``repeat_int32``, stateful (sequence batcher)
``simple_sequence``/``simple_dyna_sequence``, ``densenet_onnx`` from onnx's light DenseNet, and
``preprocess_inception_ensemble``: a pipeline of a Pillow decode step and a batched DenseNet),
signs them with a fresh key, starts ``edge-agent serve`` on loopback (OS-chosen ports, mDNS off,
model control on), deploys them with ``edge-console deploy``, runs every example with
``-u ADDRESS`` (gRPC examples at the gRPC port, HTTP ones at the HTTP port, examples with a
protocol flag once per protocol), each with a timeout, and prints one row per run: example,
result, first error line, classification. Exit 0 (it is a report) unless ``--strict`` and a run
failed. docs/compatibility.md records a run.

The model control examples count the models in the repository (Triton's test repositories
differ: the HTTP one wants 7, the gRPC one 8), so the models are deployed in stages
(``packager.triton_samples.STAGES``): the HTTP model control example runs first, with 7 models;
then ``simple`` (which it unloads) is loaded again, ``simple_dyna_sequence`` (which no example
uses without ``--dyna``) is deployed and the other examples run; the gRPC model control
example runs with 8; the ensemble example's three models are deployed last, for it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from examples.demo import LocalAgent

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "x86_64-cpu-onnxruntime"
HTTP_ON = re.compile(r"edge-agent ready: .*; HTTP on (?P<http>\S+?);")
#: Examples that take no -u and talk to localhost:8000/8001 (run only with --standard-ports).
FIXED_PORTS = {"memory_growth_test.py"}
#: Examples with a -i/--protocol flag: run once per protocol.
BOTH_PROTOCOLS = {"image_client.py", "ensemble_image_client.py", "reuse_infer_objects_client.py",
                  "memory_growth_test.py"}
#: Output that names why a run failed, and what kind of failure that is (first match wins).
KNOWN_FAILURES = (
    ("FAILED : get_server_metadata", "Triton-only check (server name)"),
    ("FAILED : Repository Index", "Triton-only check (number of models in Triton's test "
                                  "repository)"),
    ("No module named 'attrdict'", "client-side: the example needs attrdict (unmaintained, "
                                   "does not import on Python >= 3.10)"),
    ("CUDA shared memory is not served", "real gap: CUDA shm status/unregister on a CPU agent"),
    ("improper error message", "real gap: error wording"),
    ("unexpected input format", "real gap: input format"),
)
#: Examples that exit 1 printing nothing, and the check that makes them (read from their code).
SILENT_EXITS = {
    "simple_grpc_model_control.py": "real gap: model control (config override, 'failed to "
                                    "load' wording, or its repository index of 8 models)",
    "simple_http_model_control.py": "real gap: model control (config override, 'failed to "
                                    "load' wording, or its repository index of 7 models)",
}
#: When each example runs (see the module's docstring): the HTTP model control example first,
#: the gRPC one after the others, the ensemble example last; the stage of models deployed
#: before each phase.
PHASES = {"simple_http_model_control.py": 0, "simple_grpc_model_control.py": 2,
          "ensemble_image_client.py": 3}
PHASE_STAGES = {0: "base", 1: "late", 2: "", 3: "ensemble"}
#: Models only the fixed-port examples use (deployed with --standard-ports only: the model
#: control examples count the repository's models).
FIXED_PORT_MODELS = {"custom_identity_int32"}
IMAGE_ARGS = ("-m", "densenet_onnx", "-c", "3", "-s", "INCEPTION")


@dataclass
class Run:
    """One example run and its outcome."""

    example: str
    protocol: str
    args: list[str]
    passed: bool = False
    first_error: str = ""
    kind: str = ""
    output: str = ""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _tool(name: str, *args: str, timeout: float = 600) -> str:
    """Run a toolkit CLI (the module behind ``edge-pack``/``edge-console``); its stdout."""
    module = {"edge-pack": "packager.cli", "edge-console": "console.cli"}[name]
    out = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                         timeout=timeout, env=_env(), cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{name} {' '.join(args)} failed:\n{out.stdout}{out.stderr}")
    return out.stdout


def build_models(workdir: Path, *,
                 standard_ports: bool) -> tuple[Path, dict[str, list[Path]], list[str]]:
    """Write and build the example models; (public key, bundles by deploy stage, notes on
    what was left out)."""
    from packager.triton_samples import write_triton_example_models

    keys = workdir / "keys"
    _tool("edge-pack", "keygen", "--out", str(keys))
    help_text = _tool("edge-pack", "build", "--help")
    notes: list[str] = []
    bundles: dict[str, list[Path]] = {}
    out = workdir / "bundles"
    for model in write_triton_example_models(workdir / "models"):
        if model.name in FIXED_PORT_MODELS and not standard_ports:
            continue
        args = ["build", str(model.source), "--version", "1", "--profile", PROFILE, "--out",
                str(out), "--key", str(keys / "edge-pack.key"), "--quiet", "--overwrite",
                *model.build_args]
        if model.source.suffix == ".onnx":
            args += ["--name", model.name]
        if model.max_batch is not None:
            args += ["--max-batch", str(model.max_batch)]
        if model.labels is not None:
            if "--labels" in help_text:
                args += ["--labels", str(model.labels)]
            else:
                notes.append(f"{model.name}: built without labels (edge-pack build has no "
                             "--labels)")
        if model.name == "densenet_onnx":
            if "--input-format" in help_text:
                args += ["--input-format", "data_0=NCHW"]
            else:
                notes.append(f"{model.name}: no input format (edge-pack build has no "
                             "--input-format)")
        try:
            bundles.setdefault(model.stage, []).extend(
                Path(line) for line in _tool("edge-pack", *args).split()
                if line.endswith(".edgepkg"))
        except RuntimeError as exc:
            notes.append(f"{model.name}: not built: {str(exc).splitlines()[-1]}")
    return keys / "edge-pack.pub", bundles, notes


class Agent(LocalAgent):
    """``edge-agent serve`` on loopback (the demo's, with HTTP and model control); ``stop()``."""

    def __init__(self, state_dir: Path, public: Path, *, standard_ports: bool) -> None:
        super().__init__(state_dir, public)
        grpc, http = ("127.0.0.1:8001", "127.0.0.1:8000") if standard_ports else (
            "127.0.0.1:0", "127.0.0.1:0")
        state_dir.mkdir(parents=True, exist_ok=True)
        config = state_dir.parent / "agent.toml"
        config.write_text("[grpc]\nrepository_control = true\ntcp_shared_memory = true\n"
                          "[http]\nshared_memory = true\n")  # Triton's shm examples use TCP
        self.args = [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir",
                     str(state_dir), "--config", str(config), "--grpc", grpc, "--no-uds",
                     "--http", http, "--management", "127.0.0.1:0", "--insecure", "--trust",
                     str(public), "--no-mdns", "--name", "triton-examples"]
        self.http = ""

    def start(self, timeout: float = 120.0) -> None:
        """Start the agent, wait for its ready line, read its HTTP address from it."""
        try:
            super().start(timeout)
        except RuntimeError:
            self.stop()
            raise
        found = [m["http"] for line in self.log if (m := HTTP_ON.search(line))]
        if not found:
            self.stop()
            raise RuntimeError("the agent serves no HTTP:\n" + "".join(self.log))
        self.http = found[0]


def deploy(agent: Agent, bundles: list[Path], workdir: Path) -> list[str]:
    """Deploy each bundle with ``edge-console deploy``; notes on the ones that failed."""
    notes = []
    token = agent.state_dir / "management.token"
    config = workdir / "console.toml"
    config.touch()  # a console config of its own: nothing written to the user's
    for bundle in bundles:
        try:
            _tool("edge-console", "deploy", "--agent", agent.management, "--insecure",
                  "--token-file", str(token), "--config", str(config),
                  "--accept-new", str(bundle))
        except RuntimeError as exc:
            notes.append(f"{bundle.name}: not deployed: {str(exc).splitlines()[-1]}")
    return notes


def load(agent: Agent, model: str) -> list[str]:
    """Load ``model`` again through the agent's HTTP model control (KServe load); a note when
    that fails."""
    request = urllib.request.Request(f"http://{agent.http}/v2/repository/models/{model}/load",
                                     data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:  # loopback only
            answer.read()
    except OSError as exc:
        return [f"{model}: not loaded again after the HTTP model control example: {exc}"]
    return []


def write_image(path: Path) -> Path:
    """A 224x224 RGB test image (seeded noise) for the image classification examples."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def plan(examples: Path, image: Path, standard_ports: bool) -> list[Run]:
    """One :class:`Run` per example and protocol, without the address (added when run)."""
    runs: list[Run] = []
    for path in sorted(examples.glob("*.py"), key=lambda p: (PHASES.get(p.name, 1), p.name)):
        name = path.name
        protocols = (["grpc", "http"] if name in BOTH_PROTOCOLS
                     else ["http"] if "_http_" in name or name.startswith("http")
                     else ["grpc"])
        for protocol in protocols:
            args: list[str] = []
            if name in BOTH_PROTOCOLS:
                args += ["-i", protocol]
            if name in ("image_client.py", "grpc_image_client.py"):
                args += [*IMAGE_ARGS, str(image)]
            elif name == "ensemble_image_client.py":
                args += [str(image)]
            run = Run(name, protocol, args)
            if name in FIXED_PORTS and not standard_ports:
                run.first_error = "takes no -u: talks to localhost:8000/8001 (--standard-ports)"
                run.kind = "not run (fixed ports)"
            runs.append(run)
    return runs


def first_error(text: str) -> str:
    """The first line of ``text`` that reads like an error (else its last line)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for marker, _ in KNOWN_FAILURES:
        for ln in lines:
            if marker in ln:
                return ln[:200]
    details = [ln for ln in lines if ln.startswith("details = ")]
    if details:  # a raw grpc error: its message
        return details[0][len("details = "):].strip('"')[:200]
    if any(ln.startswith("Traceback") for ln in lines):
        return lines[-1][:200]  # the exception that ended the example
    for ln in lines:
        if re.search(r"\berror\b|\bfailed\b|exception|unexpected|mismatch|incorrect|"
                     r"timed out", ln, re.I) and not ln.startswith("Traceback"):
            return ln[:200]
    return lines[-1][:200] if lines else ""


def classify(run: Run, output: str) -> str:
    """What kind of failure a failed run is."""
    if "cudashm" in run.example:
        return "CUDA shm"
    if "sequence" in run.example:
        return "sequence"
    for marker, kind in KNOWN_FAILURES:
        if marker in output:
            return kind
    if not output.strip() and run.example in SILENT_EXITS:
        return SILENT_EXITS[run.example]
    return "real gap"


def execute(run: Run, examples: Path, agent: Agent, timeout: float) -> None:
    """Run one example unmodified from a scratch directory; fill in its outcome."""
    if run.kind:
        return
    address = agent.grpc if run.protocol == "grpc" else agent.http
    args = [*run.args, "-u", address] if run.example not in FIXED_PORTS else run.args
    with tempfile.TemporaryDirectory(prefix="triton-example-") as cwd:
        try:
            out = subprocess.run([sys.executable, str(examples / run.example), *args],
                                 capture_output=True, text=True, timeout=timeout, cwd=cwd,
                                 env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                                 start_new_session=True)
            output, rc = out.stdout + out.stderr, out.returncode
        except subprocess.TimeoutExpired:
            output = f"timed out after {timeout:.0f} s"
            rc = -1
    run.passed, run.output = rc == 0, output
    run.kind = "passes" if run.passed else classify(run, output)
    run.first_error = "" if run.passed else first_error(output)


def report(runs: list[Run], notes: list[str]) -> str:
    """The table (markdown), the count and the notes."""
    rows = ["| example | protocol | result | first error line | classification |",
            "|---|---|---|---|---|"]
    for r in runs:
        err = r.first_error.replace("|", "\\|")
        result = "pass" if r.passed else "not run" if r.kind.startswith("not run") else "FAIL"
        rows.append(f"| {r.example} | {r.protocol} | {result} | {err} | {r.kind} |")
    ran = [r for r in runs if not r.kind.startswith("not run")]
    rows.append("")
    rows.append(f"{sum(r.passed for r in ran)} of {len(ran)} runs pass "
                f"({len(runs) - len(ran)} not run)")
    rows += [f"note: {n}" for n in notes]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Build, serve, deploy, run every example, print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.triton_examples",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("examples", type=Path, help="Triton's src/python/examples directory")
    parser.add_argument("--workdir", type=Path, help="keep models, bundles, state and each "
                        "run's output (logs/) here (default: a temporary directory, removed)")
    parser.add_argument("--timeout", type=float, default=90.0, help="per example (s)")
    parser.add_argument("--standard-ports", action="store_true",
                        help="serve on 127.0.0.1:8001 (gRPC) and :8000 (HTTP), Triton's ports, "
                        "and also run the examples that take no -u")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any run failed")
    args = parser.parse_args(argv)
    examples = args.examples.resolve()
    if not any(examples.glob("*.py")):
        parser.error(f"{examples} holds no example .py files (pass src/python/examples)")
    with tempfile.TemporaryDirectory(prefix="triton-examples-") as tmp:
        workdir = (args.workdir or Path(tmp)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        print("building the example models ...", file=sys.stderr, flush=True)
        public, bundles, notes = build_models(workdir, standard_ports=args.standard_ports)
        agent = Agent(workdir / "state", public, standard_ports=args.standard_ports)
        agent.start()
        try:
            print(f"agent: gRPC {agent.grpc}, HTTP {agent.http}; deploying "
                  f"{sum(map(len, bundles.values()))} bundles in stages ...", file=sys.stderr,
                  flush=True)
            runs = plan(examples, write_image(workdir / "image.png"), args.standard_ports)
            for phase, stage in sorted(PHASE_STAGES.items()):
                if phase == 1:  # the HTTP model control example unloads ``simple``
                    notes += load(agent, "simple")
                notes += deploy(agent, bundles.get(stage, []), workdir)
                for run in runs:
                    if PHASES.get(run.example, 1) == phase:
                        print(f"  {run.example} ({run.protocol}) ...", file=sys.stderr,
                              flush=True)
                        execute(run, examples, agent, args.timeout)
        finally:
            agent.stop()
        if args.workdir:
            logs = workdir / "logs"
            logs.mkdir(exist_ok=True)
            for run in runs:
                (logs / f"{run.example[:-3]}-{run.protocol}.log").write_text(run.output)
    print(report(runs, notes))
    failed = any(not r.passed for r in runs)
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
