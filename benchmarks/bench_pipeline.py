"""Pipelines on the device (issue 11), as ratios measured in one run on this machine.

    PYTHONPATH=. python -m benchmarks.bench_pipeline                 # ~5 minutes
    PYTHONPATH=. python -m benchmarks.bench_pipeline --seconds 20

One agent (a subprocess, Unix socket) serves, signed and deployed like any model:
  * ``e2e``: a 640x480 colour JPEG -> examples/pipeline/jpeg_prep.py (Pillow decode at the
    smallest JPEG scale >= 224, bilinear resize to 224, ImageNet normalisation, CHW) ->
    squeezenet (ONNX Runtime) -> a Python step (top-1 label as BYTES);
  * ``ident_step``: a pipeline of one identity Python step over ``ident`` (FP32 [64]).
Figures, each pair interleaved in the same run:
  1. concurrency 8 over the Unix socket: the client sends the JPEG to ``e2e`` vs. the client
     runs the same jpeg_prep function itself, sends the float tensor to squeezenet and takes
     top-1: throughput ratio and the client's CPU per request (target >= 1.0x and <= 0.15x).
     Measured twice: with tritonclient (InferInput/infer per call) and with a lean client
     (grpcio and the generated stubs, raw contents, as examples/infer_grpc.py: what an app
     that cares about its CPU uses); the client's fixed cost per call is shown by ``ident``;
  2. server CPU per request (agent + its runtime processes) of ``ident_step`` vs. ``ident``
     called directly, at concurrency 1 and 16 (target: <= 150 us added per step);
  3. latency at concurrency 1 of ``ctx.infer("ident")`` from a Python model (in its runtime
     process, timed inside the function) vs. the same call over the Unix socket from this
     process.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pipeline"
sys.path.append(str(EXAMPLE))

import jpeg_prep  # noqa: E402  (examples/pipeline; needs Pillow)

PROFILE = "x86_64-cpu-onnxruntime"
READY = re.compile(r"edge-agent ready: listening on (?P<listen>.*?); management on "
                   r"(?P<mgmt>\S+?);")

PREP = '''
import numpy as np


def top1(inputs, ctx):
    scores = inputs["SCORES"].reshape(len(inputs["SCORES"]), -1)
    best = scores.argmax(axis=1)
    return {"LABEL": np.array([[f"class-{i}".encode()] for i in best], dtype=object)}


def ident(inputs, ctx):
    return {"Y": inputs["X"]}


def bls_time(inputs, ctx):
    import time

    x = inputs["X"]
    ctx.infer("ident", {"X": x})
    t0 = time.perf_counter()
    for _ in range(200):
        ctx.infer("ident", {"X": x})
    us = (time.perf_counter() - t0) / 200 * 1e6
    return {"US": np.full((len(x), 1), us, np.float32)}
'''


def _tensor(name: str, dt: str, shape: list[int]) -> str:
    return f'name = "{name}"\ndatatype = "{dt}"\nshape = {shape}\n'


def _specs(d: Path, prep_instances: int = 4) -> dict[str, Path]:
    (d / "steps.py").write_text(PREP)
    shutil.copy(EXAMPLE / "jpeg_prep.py", d / "jpeg_prep.py")

    def py(name: str, entry: str, ins: str, outs: str, mbs: int = 8) -> Path:
        path = d / f"{name}.toml"
        instances = prep_instances if name == "prep224" else 2
        path.write_text(f'name = "{name}"\nkind = "python"\nsource = ["steps.py", '
                        f'"jpeg_prep.py"]\nentry = "{entry}"\nmax_batch_size = {mbs}\n'
                        f"instances = {instances}\n[[inputs]]\n{ins}[[outputs]]\n{outs}")
        return path

    specs = {
        "prep224": py("prep224", "jpeg_prep:preprocess", _tensor("JPEG", "BYTES", [1]),
                      _tensor("PIXELS", "FP32", [3, 224, 224])),
        "top1": py("top1", "steps:top1", _tensor("SCORES", "FP32", [1000, 1, 1]),
                   _tensor("LABEL", "BYTES", [1])),
        "ident": py("ident", "steps:ident", _tensor("X", "FP32", [64]), _tensor("Y", "FP32", [64]),
                    16),
        "bls_time": py("bls_time", "steps:bls_time", _tensor("X", "FP32", [64]),
                       _tensor("US", "FP32", [1]), 1),
    }
    (d / "e2e.toml").write_text(textwrap.dedent('''\
        name = "e2e"
        kind = "pipeline"
        max_batch_size = 8
        instances = 8
        [[inputs]]
        name = "JPEG"
        datatype = "BYTES"
        shape = [1]
        [[outputs]]
        name = "LABEL"
        datatype = "BYTES"
        shape = [1]
        [[steps]]
        model = "prep224"
        inputs = { JPEG = "JPEG" }
        outputs = { PIXELS = "pixels" }
        [[steps]]
        model = "squeezenet"
        inputs = { data_0 = "pixels" }
        outputs = { softmaxout_1 = "scores" }
        [[steps]]
        model = "top1"
        inputs = { SCORES = "scores" }
        outputs = { LABEL = "LABEL" }
        '''))
    (d / "ident_step.toml").write_text(textwrap.dedent('''\
        name = "ident_step"
        kind = "pipeline"
        max_batch_size = 16
        instances = 4
        [[inputs]]
        name = "X"
        datatype = "FP32"
        shape = [64]
        [[outputs]]
        name = "Y"
        datatype = "FP32"
        shape = [64]
        [[steps]]
        model = "ident"
        inputs = { X = "X" }
        outputs = { Y = "Y" }
        '''))
    specs["e2e"] = d / "e2e.toml"
    specs["ident_step"] = d / "ident_step.toml"
    return specs


def build_all(work: Path, prep_instances: int = 4) -> tuple[Path, list[Path]]:
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from tests.support.model_factory import LIGHT_BUILD, conditioned_light_model

    private, public = generate_keypair(work / "keys")
    out = work / "dist"
    cnn = conditioned_light_model("squeezenet", work)
    bundles = build_bundles(cnn, name="squeezenet", version=1, profiles=[PROFILE],
                            out_dir=out, key_path=private, dynamic_batch=True, max_batch=8,
                            **LIGHT_BUILD)
    specs = _specs(work, prep_instances)
    for name in ("prep224", "top1", "ident", "bls_time", "e2e", "ident_step"):  # members first
        bundles += build_bundles(specs[name], name=name, version=1, profiles=[PROFILE],
                                 out_dir=out, key_path=private)
    return public, bundles


class Agent:
    """``edge-agent serve`` on a Unix socket (plaintext management on loopback)."""

    def __init__(self, state: Path, public: Path) -> None:
        self.uds = state / "i.sock"
        self.state = state
        args = [sys.executable, "-m", "edge_agent.cli", "serve", "--state-dir", str(state),
                "--grpc", "127.0.0.1:0", "--uds", str(self.uds), "--management",
                "127.0.0.1:0", "--insecure", "--trust", str(public), "--no-mdns"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(args, env=env, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.management = ""
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                m = READY.search(line)
                if m and not ready.is_set():
                    self.management = m["mgmt"]
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(120):
            self.stop()
            raise RuntimeError("the agent did not start")

    def cpu_s(self) -> float:
        """CPU seconds of the agent and its runtime processes so far."""
        total = 0.0
        procs = [psutil.Process(self.proc.pid)]
        procs += procs[0].children(recursive=True)
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _client_preprocess(image: bytes) -> np.ndarray:
    return jpeg_prep.pixels(image)[None]


def _camera_jpeg() -> bytes:
    """A 640x480 colour JPEG (quality 90) with gradients and noise, as a camera sends."""
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:480, 0:640].astype(np.float32)
    rgb = np.stack([np.sin(xx / 50 + k) * np.cos(yy / 70 - k) for k in range(3)], -1) * 100
    rgb += 128 + rng.normal(0, 8, rgb.shape)
    out = io.BytesIO()
    Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


class Lean:
    """A lean client: grpcio and the generated stubs, raw contents (examples/infer_grpc.py)."""

    def __init__(self, target: str) -> None:
        import grpc

        from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
        from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

        self.pb = pb
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)

    def pipeline(self, image: bytes) -> bytes:
        request = self.pb.ModelInferRequest(model_name="e2e")
        request.inputs.add(name="JPEG", datatype="BYTES", shape=(1, 1))
        request.raw_input_contents.append(len(image).to_bytes(4, "little") + image)
        return bytes(self.stub.ModelInfer(request).raw_output_contents[0][4:])  # the label

    def client_side(self, image: bytes) -> int:
        x = _client_preprocess(image)
        request = self.pb.ModelInferRequest(model_name="squeezenet")
        request.inputs.add(name="data_0", datatype="FP32", shape=x.shape)
        request.raw_input_contents.append(x.tobytes())
        raw = self.stub.ModelInfer(request).raw_output_contents[0]
        return int(np.frombuffer(raw, np.float32).argmax())

    def ident(self, x: np.ndarray) -> None:
        request = self.pb.ModelInferRequest(model_name="ident")
        request.inputs.add(name="X", datatype="FP32", shape=x.shape)
        request.raw_input_contents.append(x.tobytes())
        self.stub.ModelInfer(request)

    def close(self) -> None:
        self.channel.close()


def run_load(target: str, call: Callable, concurrency: int, seconds: float,
             agent: Agent, *, lean: bool = False) -> dict[str, float]:
    """``call(client)`` from ``concurrency`` threads for ``seconds``: req/s, client CPU ms per
    request, server CPU us per request. ``lean``: the client is a :class:`Lean`, not
    tritonclient."""
    import contextlib

    import tritonclient.grpc as grpcclient

    def make() -> Any:
        if lean:
            return contextlib.closing(Lean(target))
        return grpcclient.InferenceServerClient(target)

    stop = threading.Event()
    counts = [0] * concurrency
    errors: list[str] = []
    # clients connect and make a first call before the clock starts: a connection's setup is
    # paid once by an app, not per request (it was ~0.3 ms per request of an 8 s e2e run)
    ready = threading.Barrier(concurrency + 1)

    def worker(i: int) -> None:
        with make() as client:
            try:
                call(client)
            except Exception as exc:  # reported with the figures
                errors.append(str(exc))
            ready.wait()
            while not stop.is_set() and not errors:
                try:
                    call(client)
                    counts[i] += 1
                except Exception as exc:  # reported with the figures
                    errors.append(str(exc))
                    return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    ready.wait()
    c0, s0, t0 = time.process_time(), agent.cpu_s(), time.monotonic()
    time.sleep(seconds)
    n = max(1, sum(counts))  # answered within the window (the calls in flight are not counted)
    wall, client_cpu, server_cpu = (time.monotonic() - t0, time.process_time() - c0,
                                    agent.cpu_s() - s0)
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, e.g. {errors[0]}")
    return {"rps": n / wall, "client_ms": 1e3 * client_cpu / n, "server_us": 1e6 * server_cpu / n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prep-instances", type=int, default=4,
                        help="instances (runtime processes) of the JPEG step")
    args = parser.parse_args(argv)
    import tritonclient.grpc as grpcclient

    from edge_agent.client.agent_client import AgentClient

    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        work = Path(tmp)
        public, bundles = build_all(work, args.prep_instances)
        agent = Agent(work / "state", public)
        try:
            token = (agent.state / "management.token").read_text().strip()
            with AgentClient(agent.management, token=token) as c:
                for b in bundles:
                    r = c.deploy(b)
                    if not r.ok:
                        raise RuntimeError(f"deploy of {b.name} failed: {r.message}")
            target = f"unix://{agent.uds}"
            image = _camera_jpeg()
            jpeg = np.array([[image]], dtype=object)
            print(f"image: 640x480 colour JPEG, {len(image)} bytes; float tensor "
                  f"{3 * 224 * 224 * 4} bytes")

            def pipeline(client) -> None:  # type: ignore[no-untyped-def]
                inp = grpcclient.InferInput("JPEG", [1, 1], "BYTES")
                inp.set_data_from_numpy(jpeg)
                client.infer("e2e", [inp]).as_numpy("LABEL")

            def client_side(client) -> None:  # type: ignore[no-untyped-def]
                x = _client_preprocess(image)
                inp = grpcclient.InferInput("data_0", list(x.shape), "FP32")
                inp.set_data_from_numpy(x)
                out = client.infer("squeezenet", [inp]).as_numpy("softmaxout_1")
                int(out.reshape(-1).argmax())

            x64 = np.ones((1, 64), np.float32)

            def direct(model: str) -> Callable:
                def call(client) -> None:  # type: ignore[no-untyped-def]
                    inp = grpcclient.InferInput("X", [1, 64], "FP32")
                    inp.set_data_from_numpy(x64)
                    client.infer(model, [inp])
                return call

            def bls_us(client) -> float:  # type: ignore[no-untyped-def]
                inp = grpcclient.InferInput("X", [1, 64], "FP32")
                inp.set_data_from_numpy(x64)
                return float(client.infer("bls_time", [inp]).as_numpy("US")[0, 0])

            def uds_us(client) -> float:  # type: ignore[no-untyped-def]
                call = direct("ident")
                call(client)
                t0 = time.perf_counter()
                for _ in range(200):
                    call(client)
                return (time.perf_counter() - t0) / 200 * 1e6

            results: dict[str, list[dict[str, float]]] = {}
            latency: dict[str, list[float]] = {"ctx.infer": [], "unix socket": []}
            plan = [("e2e pipeline c8", pipeline, 8, False),
                    ("client-side c8", client_side, 8, False),
                    ("lean e2e c8", lambda c: c.pipeline(image), 8, True),
                    ("lean client-side c8", lambda c: c.client_side(image), 8, True),
                    ("ident c8", direct("ident"), 8, False),
                    ("lean ident c8", lambda c: c.ident(x64), 8, True),
                    ("ident direct c1", direct("ident"), 1, False),
                    ("ident_step c1", direct("ident_step"), 1, False),
                    ("ident direct c16", direct("ident"), 16, False),
                    ("ident_step c16", direct("ident_step"), 16, False)]
            for _name, call, conc, lean in plan:  # warm-up
                run_load(target, call, conc, 1.0, agent, lean=lean)
            c0, t0 = time.process_time(), time.monotonic()
            time.sleep(3.0)  # this process's own CPU with no request (its log pump, ...)
            idle_ms_per_s = 1e3 * (time.process_time() - c0) / (time.monotonic() - t0)
            t0 = time.perf_counter()
            for _ in range(200):
                _client_preprocess(image)
            prep_ms = (time.perf_counter() - t0) / 200 * 1e3
            for _ in range(args.rounds):
                for name, call, conc, lean in plan:
                    results.setdefault(name, []).append(
                        run_load(target, call, conc, args.seconds, agent, lean=lean))
                with grpcclient.InferenceServerClient(target) as client:
                    latency["ctx.infer"].append(bls_us(client))
                    latency["unix socket"].append(uds_us(client))
        finally:
            agent.stop()

    def med(name: str, key: str) -> float:
        return float(np.median([r[key] for r in results[name]]))

    print(f"{'run':<18} {'req/s':>8} {'client CPU ms/req':>18} {'server CPU us/req':>18}")
    for name in results:
        print(f"{name:<18} {med(name, 'rps'):8.1f} {med(name, 'client_ms'):18.2f} "
              f"{med(name, 'server_us'):18.0f}")
    print(f"client-side preprocessing alone (jpeg_prep.pixels, one thread): {prep_ms:.2f} ms")
    for label, pipe, side in (("tritonclient", "e2e pipeline c8", "client-side c8"),
                              ("lean client", "lean e2e c8", "lean client-side c8")):
        thr = med(pipe, "rps") / med(side, "rps")
        cpu = med(pipe, "client_ms") / med(side, "client_ms")
        net = [max(0.0, med(n, "client_ms") - idle_ms_per_s / med(n, "rps"))
               for n in (pipe, side)]
        print(f"figure 1 ({label}): pipeline throughput {thr:.2f}x the client-side path "
              f"(target >= 1.0x; Triton 2.51 reached 0.83x); client CPU per request "
              f"{cpu:.2f}x (target <= 0.15x); net of the idle CPU of this process "
              f"({idle_ms_per_s:.1f} ms/s): {net[0]:.2f} vs {net[1]:.2f} ms, "
              f"{net[0] / max(net[1], 1e-9):.2f}x")
    for c in (1, 16):
        added = med(f"ident_step c{c}", "server_us") - med(f"ident direct c{c}", "server_us")
        print(f"figure 2: one pipeline step adds {added:.0f} us server CPU per request at "
              f"concurrency {c} (target <= 150 us)")
    bls, uds = (float(np.median(latency[k])) for k in ("ctx.infer", "unix socket"))
    print(f"figure 3: ctx.infer from a Python model's runtime process {bls:.0f} us per call vs. "
          f"{uds:.0f} us over the Unix socket from another process (concurrency 1): "
          f"{bls / uds:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
