"""The whole loop on this machine: package, sign, serve, deploy, swap under load, roll back.

    python -m examples.demo [--workdir DIR]        (./scripts/demo.sh runs this)

1. generate the sample MLP twice (two seeds = versions 1 and 2); 2. make a signing key;
3. build signed bundles for every CPU profile, inspect and verify them; 4. start a local agent
(a subprocess, loopback only, mDNS off); 5. deploy version 1; 6. run inference with tritonclient
and compare with ONNX Runtime on the source model; 7. deploy version 2 under concurrent load
and count failed requests; 8. roll back; 9. print the metrics summary and the deployment
history. Files go under ./demo-out/ (or --workdir). Exits 0 on success; the agent is always
stopped.

Needs ``pip install 'edgeship[all]'`` (packager, agent, console and tritonclient).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"edge-agent ready: listening on (?P<listen>.*?); management on "
                   r"(?P<mgmt>\S+?);")
LOAD_THREADS = 8

console = Console()


def fresh_workdir(doc: str, default: str, argv: list[str] | None) -> Path:
    """An example script's ``--workdir`` (``default`` unless given; ``doc``: its help),
    emptied and created."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path(default))
    workdir: Path = parser.parse_args(argv).workdir.resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return workdir


def step(n: int, title: str) -> None:
    console.rule(f"[bold cyan]Step {n}[/]  {title}", align="left")


def build(workdir: Path) -> tuple[Path, dict[int, Path], list[Path]]:
    from rich.progress import Progress

    from packager.build import build_bundles
    from packager.bundle.profiles import list_profiles
    from packager.bundle.signing import generate_keypair
    from packager.samples import make_mlp

    step(1, "generate the sample MLP: version 1 (seed 1) and version 2 (seed 2)")
    sources = {v: make_mlp(workdir / f"mlp-v{v}.onnx", seed=v) for v in (1, 2)}
    for v, p in sources.items():
        console.print(f"  version {v}: {p} ({p.stat().st_size} bytes)")

    step(2, "make an Ed25519 signing key pair")
    private, public = generate_keypair(workdir / "keys")
    console.print(f"  private {private}\n  public  {public}")

    # OpenVINO int8 needs representative inputs (--calibration-data): not in this demo
    profiles = [p.name for p in list_profiles() if "-cpu-" in p.name
                and not (p.precision == "int8" and p.backend != "onnxruntime")]
    step(3, f"build signed bundles for every CPU profile ({', '.join(profiles)})")
    bundles: list[Path] = []
    with Progress(console=console, transient=True) as progress:
        for v, src in sources.items():
            task = progress.add_task(f"mlp version {v}", total=None)
            bundles += build_bundles(src, name="mlp", version=v, profiles=profiles,
                                     out_dir=workdir / "bundles", key_path=private,
                                     dynamic_batch=True,
                                     progress=lambda d, done, total, t=task, v=v: progress.update(
                                         t, description=f"v{v}: {d}", completed=done,
                                         total=total))
    return public, sources, bundles


def inspect_and_verify(public: Path, bundles: list[Path]) -> None:
    from packager.bundle.reader import open_bundle

    table = Table(title="bundles (every file hash and the signature verified)",
                  title_justify="left")
    for col in ("file", "profile", "arch", "backend", "precision", "KiB", "signed by"):
        table.add_column(col)
    for path in bundles:
        with open_bundle(path) as reader:
            key = reader.verify_signature([public])
            reader.verify_files()
            m = reader.manifest
        table.add_row(path.name, m.profile, m.arch, m.backend, m.precision,
                      f"{path.stat().st_size / 1024:.0f}", key or "-")
    console.print(table)


class LocalAgent:
    """``edge-agent serve`` as a subprocess on loopback (its own process group)."""

    def __init__(self, state_dir: Path, public: Path) -> None:
        self.state_dir = state_dir
        self.args = [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir",
                     str(state_dir), "--grpc", "127.0.0.1:0", "--no-uds", "--management",
                     "127.0.0.1:0", "--trust", str(public), "--no-mdns", "--name", "demo-agent"]
        self.proc: subprocess.Popen[str] | None = None
        self.grpc = self.management = ""
        self.log: list[str] = []

    def start(self, timeout: float = 120.0) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(self.args, env=env, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log.append(line)
                match = READY.search(line)
                if match and not ready.is_set():
                    tcp = [t for t in match["listen"].split(", ") if not t.startswith("unix:")]
                    self.grpc, self.management = tcp[0], match["mgmt"]
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the agent did not start:\n" + "".join(self.log))

    @property
    def token(self) -> str:
        return (self.state_dir / "management.token").read_text().strip()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


def deploy(client, bundles: list[Path], version: int) -> None:  # type: ignore[no-untyped-def]
    from console.commands import pick_bundle, read_bundles

    info = client.info()
    candidates = [b for b in read_bundles(bundles) if b.manifest.version == version]
    chosen = pick_bundle(candidates, info)
    console.print(f"  agent profile {info.profile}: uploading {chosen.path.name}")

    def show(s) -> None:  # type: ignore[no-untyped-def]
        mark = "[green]ok[/]" if s.ok else "[red]FAILED[/]"
        console.print(f"    {s.step:<9} {mark} {s.message}")

    result = client.deploy(chosen.path, on_step=show)
    if not result.ok:
        raise RuntimeError(f"deploy of version {version} failed: {result.message}")


def infer_once(grpc_target: str, sources: dict[int, Path]) -> None:
    import onnxruntime as ort
    import tritonclient.grpc as tc

    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    with tc.InferenceServerClient(grpc_target) as triton:
        inp = tc.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = triton.infer("mlp", [inp])
    version = int(result.get_response().model_version)
    got = result.as_numpy("probs")
    ref = ort.InferenceSession(str(sources[version]),
                               providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    console.print(f"  tritonclient -> {grpc_target}: model_version {version}, top classes "
                  f"{got.argmax(1).tolist()}, max |agent - onnxruntime| = "
                  f"{np.abs(got - ref).max():.2e}")


def swap_under_load(client, grpc_target: str, bundles: list[Path]) -> None:  # type: ignore[no-untyped-def]
    import tritonclient.grpc as tc

    stop = threading.Event()
    versions: Counter[int] = Counter()
    failures: list[str] = []
    lock = threading.Lock()
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)

    def load() -> None:
        with tc.InferenceServerClient(grpc_target) as triton:
            while not stop.is_set():
                inp = tc.InferInput("input", [1, 64], "FP32")
                inp.set_data_from_numpy(x)
                try:
                    v = int(triton.infer("mlp", [inp]).get_response().model_version)
                    with lock:
                        versions[v] += 1
                except Exception as exc:
                    with lock:
                        failures.append(str(exc))

    threads = [threading.Thread(target=load, daemon=True) for _ in range(LOAD_THREADS)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    deploy(client, bundles, 2)
    took = time.monotonic() - t0
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(30)
    total = sum(versions.values()) + len(failures)
    style = "green" if not failures else "red"
    console.print(f"  {LOAD_THREADS} client threads, {total} requests: "
                  f"[{style}]{len(failures)} failed[/], answered by version 1: {versions[1]}, "
                  f"version 2: {versions[2]}; deploy call took {took:.2f} s")
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed during the swap: {failures[0]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("demo-out"),
                        help="where everything is written (default ./demo-out)")
    args = parser.parse_args(argv)
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    workdir = args.workdir.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    console.print(f"[bold]edge-toolkit demo[/] in {workdir}")
    started = time.monotonic()
    agent: LocalAgent | None = None
    try:
        public, sources, bundles = build(workdir)
        inspect_and_verify(public, bundles)
        step(4, "start a local agent (loopback only, mDNS off)")
        agent = LocalAgent(workdir / "agent-state", public)
        agent.start()
        from edge_agent.client.agent_client import AgentClient, PinnedTls
        from edge_agent.management.tls import fingerprint_of

        pin = fingerprint_of(agent.state_dir)  # what `edge-agent token` prints on the device
        console.print(f"  inference {agent.grpc}, management {agent.management} over TLS, "
                      f"token in {agent.state_dir / 'management.token'} (mode 0600), "
                      f"certificate {pin[:23]}... pinned")

        with AgentClient(agent.management, token=agent.token, tls=PinnedTls(pin)) as client:
            step(5, "deploy version 1 (verify, stage, load + warm up, probe, switch)")
            deploy(client, bundles, 1)
            step(6, "run inference with tritonclient (KServe v2 gRPC)")
            infer_once(agent.grpc, sources)
            step(7, "deploy version 2 under load")
            swap_under_load(client, agent.grpc, bundles)
            infer_once(agent.grpc, sources)
            step(8, "roll back to version 1")
            result = client.rollback("mlp")
            console.print(f"  {result.message}: "
                          + ", ".join(s.step for s in result.deployment.steps))
            infer_once(agent.grpc, sources)
            step(9, "metrics summary and deployment history")
            time.sleep(2.2)  # the recorder flushes once a second
            from edge_agent.metrics.summary import render_summary

            render_summary(agent.state_dir, console, window_s=120)
            from console.cli import deployments_table

            console.print(deployments_table(client.deployments()))
    except ModuleNotFoundError as exc:
        console.print(f"[bold red]demo failed:[/] {exc}. The demo runs in the venv that "
                      "./scripts/demo.sh creates with the project's [all] extra; rerun "
                      "./scripts/demo.sh, or install it into yours: pip install -e '.[all]'")
        return 1
    except Exception as exc:
        console.print(f"[bold red]demo failed:[/] {exc}")
        return 1
    finally:
        code = agent.stop() if agent is not None else None
        if code is not None:
            console.print(f"  agent stopped (exit code {code})")
    console.print(f"[bold green]demo finished[/] in {time.monotonic() - started:.1f} s; "
                  f"files in {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
