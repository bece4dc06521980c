"""What an ONNX Runtime load costs in resident memory, per file layout and session option.

    PYTHONPATH=. python -m benchmarks.bench_ort_load            # ~1 minute
    PYTHONPATH=. python -m benchmarks.bench_ort_load --pad-mib 40

A light squeezenet padded with ``--pad-mib`` MiB of weights that every inference reads
(``tests/support/model_factory.padded_light_model``, a 1x1 convolution), saved as one file and
as a graph plus ONNX external data (``packager/external_data.py``). Each variant is loaded in
a fresh process (ONNX Runtime imported first): the peak resident memory during the session's
creation (sampled every millisecond), and what stays resident after one inference (anonymous
and file-backed pages), in MiB above the process before the load. The agent under a memory
budget uses ``packager.bundle.ort_memory.keep_one_copy`` (the last rows).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, sys, threading
import numpy as np
import onnxruntime as ort
from packager.bundle.ort_memory import keep_one_copy

def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    return out

path, level, prepack, lean = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
so = ort.SessionOptions()
so.enable_cpu_mem_arena = False
so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
if not prepack:
    so.add_session_config_entry("session.disable_prepacking", "1")
if lean:
    keep_one_copy(so, ort)
before = status()
peak = [before["VmRSS"]]
stop = threading.Event()

def sample():
    while not stop.wait(0.001):
        peak[0] = max(peak[0], status()["VmRSS"])

sampler = threading.Thread(target=sample)
sampler.start()
session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
stop.set()
sampler.join()
x = np.zeros((1, 3, 224, 224), np.float32)
session.run(None, {session.get_inputs()[0].name: x})
after = status()
print(json.dumps({"peak": peak[0] - before["VmRSS"], "kept": after["VmRSS"] - before["VmRSS"],
                  "anon": after["RssAnon"] - before["RssAnon"],
                  "file": after["RssFile"] - before["RssFile"]}))
"""

VARIANTS = (  # (label, layout, graph optimization level, prepacking, keep_one_copy)
    ("one file, ORT_ENABLE_ALL (the agent without a budget)", "one", "ORT_ENABLE_ALL", True,
     False),
    ("one file, ORT_ENABLE_ALL, no prepacking", "one", "ORT_ENABLE_ALL", False, False),
    ("external data, ORT_ENABLE_ALL", "ext", "ORT_ENABLE_ALL", True, False),
    ("one file, ORT_ENABLE_EXTENDED", "one", "ORT_ENABLE_EXTENDED", True, False),
    ("one file, keep_one_copy (the agent under a budget, old bundles)", "one",
     "ORT_ENABLE_ALL", True, True),
    ("external data, keep_one_copy (the agent under a budget)", "ext", "ORT_ENABLE_ALL", True,
     True),
)


def _models(pad_mib: float, work: Path) -> dict[str, Path]:
    import onnx

    from packager.external_data import externalize
    from tests.support.model_factory import padded_light_model

    one = padded_light_model("squeezenet", work / "one", pad_mib)
    ext_dir = work / "ext"
    ext_dir.mkdir()
    ext = ext_dir / "model.onnx"
    onnx.save(onnx.load(str(one)), str(ext))
    assert externalize(ext, threshold=0), "no external data written"
    return {"one": one, "ext": ext}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pad-mib", type=float, default=201.0, help="MiB of weights added")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-ort-load-") as tmp:
        models = _models(args.pad_mib, Path(tmp))
        print(f"light squeezenet + {args.pad_mib:g} MiB of weights read by every inference; "
              "MiB above the process before the load")
        print("| variant | peak during the load | kept after one inference (anon + file) |")
        print("|---|---|---|")
        for label, layout, level, prepack, lean in VARIANTS:
            done = subprocess.run([sys.executable, "-c", _CHILD, str(models[layout]), level,
                                   "1" if prepack else "0", "1" if lean else "0"],
                                  capture_output=True, text=True, check=True, timeout=600)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"| {label} | {r['peak']:.0f} | {r['kept']:.0f} ({r['anon']:.0f} + "
                  f"{r['file']:.0f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
