"""Issue 31's figures: the same ``@batch`` ONNX Runtime function (benchmarks/inline_ort.py)
served three ways, measured in one run with the same closed-loop load generator:

- PyTriton 0.7.0 (the anchor: /work/shared/anchor/pytriton_serve.py, Triton's front end and
  batcher, the function behind ZMQ; needs the /tmp/pt venv of the anchor's README);
- ``edge_agent.inline.FunctionServer`` in its own process (``--serve``);
- the same module built with ``edge-pack build MODULE:FUNCTION`` and served by ``edge-agent
  serve``: "bundle" with the Python backend's default isolation (a runtime process per
  instance), "bundle-thread" with ``isolation = "thread"`` (in the agent's process, as the
  bound function runs).

Per server: start -> ready (process start until both models answer ready; the servers start
one at a time, then all stay up), then interleaved rounds of MLP p50 at 1 in flight, MLP and
squeezenet throughput at 16 in flight (the median round per figure; on a shared machine only
interleaved figures compare); then the ratios against PyTriton and bundle/inline::

    python -m benchmarks.bench_inline --rounds 3 --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np

from benchmarks.loadgen import LoadResult, infer_request_bytes, run_load

ROOT = Path(__file__).resolve().parents[1]
ANCHOR = Path(os.environ.get("EDGE_ANCHOR", "/work/shared/anchor"))
PT_VENV = Path(os.environ.get("PT_VENV", "/tmp/pt"))
MODELS = {"mlp": ("x", (1, 256)), "squeezenet": ("data_0", (1, 3, 224, 224))}


def serve_inline(port: int) -> None:
    """``--serve``: the two functions bound in-process on 127.0.0.1:PORT until SIGTERM."""
    from benchmarks import inline_ort
    from edge_agent.inline import FunctionServer

    with FunctionServer(address=f"127.0.0.1:{port}", workers=8) as server:
        server.bind("mlp", inline_ort.mlp)
        server.bind("squeezenet", inline_ort.squeezenet)
        server.serve()


def _ready(target: str) -> bool:
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
    from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as rpc

    try:
        with grpc.insecure_channel(target) as channel:
            stub = rpc.GRPCInferenceServiceStub(channel)
            return all(stub.ModelReady(pb.ModelReadyRequest(name=m), timeout=1).ready
                       for m in MODELS)
    except grpc.RpcError:
        return False


@contextlib.contextmanager
def started(cmd: list[str], target: str, env: dict[str, str],
            log: Path) -> Iterator[float]:
    """Run ``cmd``; yield the seconds from its start until both models are ready."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=ROOT)
    try:
        while not _ready(target):
            if proc.poll() is not None or time.perf_counter() - t0 > 180:
                raise RuntimeError(f"{cmd[:3]} did not become ready; see {log}")
            time.sleep(0.02)
        yield time.perf_counter() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def measure(target: str, seconds: float) -> dict[str, LoadResult]:
    """MLP at c=1 and c=16, squeezenet at c=16."""
    rng = np.random.default_rng(0)
    payloads = {m: infer_request_bytes(m, {name: rng.random(shape, dtype=np.float32)})
                for m, (name, shape) in MODELS.items()}
    out = {}
    for key, model, c in (("mlp c=1", "mlp", 1), ("mlp c=16", "mlp", 16),
                          ("squeezenet c=16", "squeezenet", 16)):
        out[key] = asyncio.run(run_load(target, payloads[model], concurrency=c,
                                        seconds=seconds, warmup=1.0))
    return out


def _bundles(work: Path, env: dict[str, str]) -> tuple[Path, list[Path]]:
    keys = work / "keys"
    subprocess.run([sys.executable, "-m", "packager.cli", "keygen", "--out", str(keys)],
                   check=True, env=env, capture_output=True)
    paths = []
    for model in MODELS:
        built = subprocess.run(
            [sys.executable, "-m", "packager.cli", "build",
             f"benchmarks/inline_ort.py:{model}", "--name", model, "--version", "1",
             "--profile", "x86_64-cpu-onnxruntime", "--key", str(keys / "edge-pack.key"),
             "--out", str(work / "dist"), "--requires", "onnxruntime"],
            check=True, env=env, capture_output=True, text=True, cwd=ROOT)
        paths.append(Path(built.stdout.split()[-1]))
    return keys / "edge-pack.pub", paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--skip-pytriton", action="store_true")
    args = parser.parse_args(argv)
    if args.serve:
        serve_inline(args.serve)
        return 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    work = Path(tempfile.mkdtemp(prefix="bench-inline-"))
    results: dict[str, tuple[float, dict[str, LoadResult]]] = {}
    runs: list[tuple[str, list[str], str, dict[str, str]]] = []
    if not args.skip_pytriton:
        pylib = subprocess.run([str(PT_VENV / "bin/python"), "-c",
                                "import sys;print(sys.base_prefix)"], check=True,
                               capture_output=True, text=True).stdout.strip() + "/lib"
        pt_env = {**os.environ, "LD_LIBRARY_PATH": pylib + ":" +
                  os.environ.get("LD_LIBRARY_PATH", "")}
        runs.append(("pytriton", [str(PT_VENV / "bin/python"),
                                  str(ANCHOR / "pytriton_serve.py")], "127.0.0.1:8101", pt_env))
    runs.append(("inline", [sys.executable, "-m", "benchmarks.bench_inline", "--serve",
                            "8131"], "127.0.0.1:8131", env))
    pub, bundles = _bundles(work, env)
    for name, port, isolation in (("bundle", 8132, "auto"), ("bundle-thread", 8133, "thread")):
        state = work / name
        for bundle in bundles:
            subprocess.run([sys.executable, "-m", "edge_agent.cli", "add-bundle",
                            "--state-dir", str(state), "--pubkey", str(pub), str(bundle)],
                           check=True, env=env, capture_output=True)
        toml = work / f"{name}.toml"
        toml.write_text("".join(f"[models.{m}]\nmax_queue_delay_us = 500\n"
                                f"isolation = \"{isolation}\"\n" for m in MODELS))
        runs.append((name, [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir",
                            str(state), "--config", str(toml), "--grpc", f"127.0.0.1:{port}",
                            "--no-uds", "--trust", str(pub)], f"127.0.0.1:{port}", env))
    with contextlib.ExitStack() as stack:
        ready: dict[str, float] = {}
        for name, cmd, target, run_env in runs:  # started one at a time: start->ready alone
            ready[name] = stack.enter_context(started(cmd, target, run_env,
                                                      work / f"{name}.log"))
            print(f"{name:9s} start->ready {ready[name]:6.2f} s", flush=True)
        rounds: dict[str, list[dict[str, LoadResult]]] = {name: [] for name in ready}
        for i in range(args.rounds):  # interleaved: the machine's load hits each alike
            for name, _cmd, target, _env in runs:
                rounds[name].append(measure(target, args.seconds))
                print(f"round {i + 1} {name:9s} " + "  ".join(
                    f"{k}: {r.throughput:.0f}/s p50 {r.p50_ms:.2f} ms"
                    for k, r in rounds[name][-1].items()), flush=True)
    for name in ready:
        results[name] = (ready[name], {k: _median([r[k] for r in rounds[name]])
                                       for k in rounds[name][0]})
        print(f"{name:9s} median of {args.rounds} rounds, start->ready {ready[name]:.2f} s")
        for key, r in results[name][1].items():
            print(f"  {key:16s} {r.line()}", flush=True)
    _ratios(results)
    return 0


def _median(results: list[LoadResult]) -> LoadResult:
    """The round with the median throughput (its p50 with it)."""
    ordered = sorted(results, key=lambda r: r.throughput)
    return ordered[len(ordered) // 2]


def _ratios(results: dict[str, tuple[float, dict[str, LoadResult]]]) -> None:
    def line(a: str, b: str) -> None:
        if a not in results or b not in results:
            return
        (ra, la), (rb, lb) = results[a], results[b]
        print(f"{a}/{b}: mlp p50 c=1 {la['mlp c=1'].p50_ms / lb['mlp c=1'].p50_ms:.2f}x  "
              f"mlp thr c=16 {la['mlp c=16'].throughput / lb['mlp c=16'].throughput:.2f}x  "
              f"squeezenet thr c=16 "
              f"{la['squeezenet c=16'].throughput / lb['squeezenet c=16'].throughput:.2f}x  "
              f"start->ready {ra / rb:.2f}x")

    line("inline", "pytriton")
    line("bundle", "pytriton")
    line("bundle", "inline")
    line("bundle-thread", "inline")


if __name__ == "__main__":
    raise SystemExit(main())
