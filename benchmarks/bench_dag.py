"""A pipeline that branches (issue 26): two CNNs on one image, then a merge step, at c=1.

    PYTHONPATH=. python -m benchmarks.bench_dag                     # ~2 minutes
    PYTHONPATH=. python -m benchmarks.bench_dag --seconds 10 --rounds 5

One agent (a subprocess, Unix socket) serves the conditioned light squeezenet and shufflenet
(ONNX Runtime, one image [1, 3, 224, 224], ``threads = 1`` each by default: one core per
execution, as the execution gate counts cores), a Python ``merge`` step (both branches' top-1
class) and two pipelines of the same three steps:
  * ``branched``: both CNNs read the image, so they run at the same time; merge reads both;
  * ``chained``: the same steps, the shufflenet step made to wait for squeezenet's scores by a
    condition that always holds (``when = {tensor = "scores_a", op = ">=", value = 0}``, on
    softmax outputs): the steps in sequence, as pipelines ran before they branched.
One client at concurrency 1 sends the two pipelines the same image, alternately request by
request (each pair in alternating order), for ``--rounds`` rounds of ``--seconds``: other work
on a shared machine comes and goes, and interleaving each request with the other pipeline's
shows both the same load. The figure is the ratio of the median latencies (each pipeline's
over every round), printed with each round's and the machine's load average.
Target: <= 0.65x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_serve import ORT, Proc
from benchmarks.loadgen import infer_request_bytes

MERGE = '''
import numpy as np


def merge(inputs, ctx):
    """The top-1 class of each branch."""
    a = inputs["A"].reshape(-1).argmax()
    b = inputs["B"].reshape(-1).argmax()
    return {"BEST": np.array([a, b], np.int64)}
'''

CNNS = {"squeezenet": ("data_0", "softmaxout_1", "[1, 1000, 1, 1]"),
        "shufflenet": ("gpu_0/data_0", "gpu_0/softmax_1", "[1, 1000]")}
"""Model -> its input, its output, and the output's shape."""


def _pipeline(name: str, chained: bool) -> str:
    a_in, a_out, _ = CNNS["squeezenet"]
    b_in, b_out, _ = CNNS["shufflenet"]
    when = '\nwhen = { tensor = "scores_a", op = ">=", value = 0 }' if chained else ""
    return (f'name = "{name}"\nkind = "pipeline"\nmax_batch_size = 0\n'
            '[[inputs]]\nname = "IMAGE"\ndatatype = "FP32"\nshape = [1, 3, 224, 224]\n'
            '[[outputs]]\nname = "BEST"\ndatatype = "INT64"\nshape = [2]\n'
            f'[[steps]]\nmodel = "squeezenet"\ninputs = {{ "{a_in}" = "IMAGE" }}\n'
            f'outputs = {{ "{a_out}" = "scores_a" }}\n'
            f'[[steps]]\nmodel = "shufflenet"\ninputs = {{ "{b_in}" = "IMAGE" }}\n'
            f'outputs = {{ "{b_out}" = "scores_b" }}{when}\n'
            '[[steps]]\nmodel = "merge"\ninputs = { A = "scores_a", B = "scores_b" }\n'
            'outputs = { BEST = "BEST" }\n')


def build_state(work: Path) -> tuple[Path, Path]:
    """The CNNs, merge and both pipelines, signed and installed; (state dir, public key)."""
    from edge_agent.cli import main as agent_cli
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from tests.support.model_factory import LIGHT_BUILD, conditioned_light_model

    private, public = generate_keypair(work / "keys")
    state, out = work / "state", work / "bundles"
    bundles = []
    for name in CNNS:
        bundles += build_bundles(conditioned_light_model(name, work), name=name, version=1,
                                 profiles=[ORT], out_dir=out, key_path=private, **LIGHT_BUILD)
    (work / "merge_step.py").write_text(MERGE)
    merge_spec = work / "merge.toml"
    merge_spec.write_text(
        'name = "merge"\nkind = "python"\nsource = ["merge_step.py"]\n'
        'entry = "merge_step:merge"\nmax_batch_size = 0\n'
        + "".join(f'[[inputs]]\nname = "{k}"\ndatatype = "FP32"\nshape = {CNNS[m][2]}\n'
                  for k, m in (("A", "squeezenet"), ("B", "shufflenet")))
        + '[[outputs]]\nname = "BEST"\ndatatype = "INT64"\nshape = [2]\n')
    specs = [merge_spec]
    for name in ("branched", "chained"):
        spec = work / f"{name}.toml"
        spec.write_text(_pipeline(name, name == "chained"))
        specs.append(spec)
    for spec in specs:
        bundles += build_bundles(spec, name="", version=1, profiles=[ORT], out_dir=out,
                                 key_path=private)
    for b in bundles:
        if agent_cli(["add-bundle", "--state-dir", str(state), "--pubkey", str(public),
                      str(b)]):
            raise SystemExit(f"add-bundle {b} failed")
    return state, public


def config_toml(work: Path, state: Path, public: Path, sock: Path, threads: int) -> Path:
    cnns = "".join(f"[models.{name}]\nthreads = {threads}\n" for name in CNNS)
    path = work / "agent.toml"
    path.write_text(f'state_dir = "{state}"\n[grpc]\nuds = "{sock}"\naddress = ""\n'
                    f'[management]\ntrust = ["{public}"]\n{cnns}')
    return path


def rounds(sock: Path, models: tuple[str, str], count: int,
           seconds: float) -> dict[str, list[float]]:
    """Latencies (ms) of ``models`` called alternately at concurrency 1 over ``sock``."""
    import grpc

    from benchmarks.loadgen import INFER_METHOD

    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    payloads = {m: infer_request_bytes(m, {"IMAGE": image}) for m in models}
    times: dict[str, list[float]] = {m: [] for m in models}
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        call = channel.unary_unary(INFER_METHOD)
        for m in models:  # warm both paths up
            for _ in range(5):
                call(payloads[m], timeout=120)
        for r in range(count):
            start, load, mark = time.monotonic(), os.getloadavg()[0], len(times[models[0]])
            pair = 0
            while time.monotonic() - start < seconds:
                for m in models if pair % 2 == 0 else models[::-1]:
                    t0 = time.perf_counter()
                    call(payloads[m], timeout=120)
                    times[m].append((time.perf_counter() - t0) * 1e3)
                pair += 1
            print(f"round {r + 1}: " + ", ".join(
                f"{m} p50 {statistics.median(times[m][mark:]):.1f} ms" for m in models)
                + f" ({pair} pairs, load average {load:.1f})", flush=True)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=1,
                        help="[models.NAME] threads of each CNN (0: the runtime's default)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-dag-") as tmp:
        work = Path(tmp)
        state, public = build_state(work)
        sock = work / "agent.sock"
        load0 = os.getloadavg()[0]
        agent = Proc(["-m", "edge_agent.cli", "serve", "--config",
                      str(config_toml(work, state, public, sock, args.threads))], "ready")
        try:
            times = rounds(sock, ("branched", "chained"), args.rounds, args.seconds)
        finally:
            agent.stop()
    branched, chained = (statistics.median(times[m]) for m in ("branched", "chained"))
    print(f"c=1, {args.rounds} rounds of {args.seconds:g} s, requests alternated; CNN threads "
          f"{args.threads}; {os.cpu_count()} cores; load average {load0:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end (1 min)")
    print(f"branched p50 {branched:.1f} ms, chained p50 {chained:.1f} ms: "
          f"ratio {branched / chained:.2f}x (target <= 0.65x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
