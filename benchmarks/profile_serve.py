"""Where the agent's time goes under load: py-spy samples of the GIL holder, by layer.

    pip install py-spy     # not a project dependency
    python -m benchmarks.profile_serve [--concurrency 16] [--seconds 6] [--config agent.toml]

Builds an MLP bundle, serves it with ``edge-agent serve`` on a Unix socket, drives it with
benchmarks.loadgen and samples the agent with ``py-spy record --gil`` (only the thread holding
the GIL), then sums the samples by layer: gRPC's Python server, the protocol edge, the serving
core, ONNX Runtime. On a 2-core box the GIL holder is the bottleneck of a Python server, so
this is the budget that decides throughput.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.bench_serve import ENV, ORT, Proc, _cpu_s


def classify(frames: list[str]) -> str:
    """The layer a sampled stack belongs to (by its innermost frame)."""
    leaf, joined = frames[-1], ";".join(frames)
    if "onnxruntime" in leaf:
        return "ONNX Runtime (GIL-holding parts of run)"
    if "edge_agent/frontends/grpc" in leaf:
        return "protocol edge (converters, servicer)"
    if "edge_agent/core" in leaf or "edge_agent/backends" in leaf:
        return "serving core (data plane, batcher, backend)"
    if "grpc/" in leaf:
        return "gRPC Python server machinery"
    if "concurrent/futures" in leaf or "threading.py" in leaf:
        if "edge_agent/core" in joined:
            return "futures/locks of the serving core"
        return "thread pool/locks of the gRPC server"
    return "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", "-c", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--config", type=Path, metavar="AGENT_TOML")
    parser.add_argument("--top", type=int, default=0, metavar="N",
                        help="also print the N innermost frames of ours that hold the GIL most")
    parser.add_argument("--leaves", type=int, default=0, metavar="N",
                        help="also print the N innermost frames (any code) that hold the GIL most")
    parser.add_argument("--raw", type=Path, metavar="FILE",
                        help="also keep py-spy's raw stacks (one collapsed stack a line) here")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 1
    from edge_agent.cli import main as agent_cli
    from edge_agent.perf.server_stats import stats_reader
    from packager.build import build_bundles
    from tests.support.model_factory import make_mlp

    with tempfile.TemporaryDirectory(prefix="profile-serve-") as tmp:
        work = Path(tmp)
        bundle, = build_bundles(make_mlp(work / "mlp.onnx"), name="mlp", version=1,
                                profiles=[ORT], out_dir=work / "b")
        state = work / "state"
        agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned", str(bundle)])
        sock = work / "agent.sock"
        config = ["--config", str(args.config.resolve())] if args.config else []
        agent = Proc(["-m", "edge_agent.cli", "serve", "--state-dir", str(state), "--grpc",
                      "none", "--uds", str(sock), *config], "edge-agent ready")
        try:
            load = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.loadgen", "--target", f"unix:{sock}",
                 "--model", "mlp", "-c", str(args.concurrency), "-t", str(args.seconds + 2)],
                env=ENV, stdout=subprocess.PIPE, text=True)
            raw = work / "profile.txt"
            read_stats = stats_reader(f"unix:{sock}", "mlp")
            stats0, cpu0 = read_stats(), _cpu_s(agent.pid)
            subprocess.run([py_spy, "record", "--pid", str(agent.pid), "--gil", "--format",
                            "raw", "--rate", "400", "--duration", str(int(args.seconds)),
                            "-o", str(raw)], check=True, capture_output=True)
            window = read_stats() - stats0
            cpu_s = _cpu_s(agent.pid) - cpu0
            print("load:", load.communicate(timeout=120)[0].strip())
            requests = window.success_count or 1
            print(f"server (profiled window, py-spy included): {cpu_s * 1e6 / requests:.0f} us "
                  f"CPU per request, {window.inference_count / max(1, window.execution_count):.1f}"
                  f" rows per execution")
            print("\n".join(window.report()))
        finally:
            agent.stop()
        if args.raw:
            shutil.copyfile(raw, args.raw)
        layers: Counter[str] = Counter()
        ours: Counter[str] = Counter()
        leaves: Counter[str] = Counter()
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            layers[classify(frames)] += int(count)
            leaves[frames[-1]] += int(count)
            mine = [f for f in frames if "edge_agent/" in f]
            if mine:
                ours[mine[-1]] += int(count)
    total = sum(layers.values()) or 1
    print(f"GIL-holding samples: {total}")
    for layer, n in layers.most_common():
        print(f"  {100 * n / total:5.1f}%  {layer}")
    if args.top:
        print(f"innermost edge_agent frame of the GIL holder (top {args.top}):")
        for frame, n in ours.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {frame}")
    if args.leaves:
        print(f"innermost frame of the GIL holder (top {args.leaves}):")
        for frame, n in leaves.most_common(args.leaves):
            print(f"  {100 * n / total:5.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
