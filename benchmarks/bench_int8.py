"""fp32 vs fp16 vs int8 on both CPU runtimes, on a CNN trained on the digits
(tests/support/digits_cnn.py).

Every variant but two is what ``edge-pack build`` writes for a profile (the artifact is taken
out of the bundle): ONNX Runtime fp32, int8 dynamic (no calibration data) and int8 static
(``--calibration-data``), OpenVINO fp32, fp16 weights and int8 static (the calibrated QDQ model
converted to IR). Two are for comparison only: ONNX Runtime fp16 (onnxconverter-common's
float16 conversion; no profile ships it) and NNCF's ``nncf.quantize`` of the fp32 IR (run
when nncf is installed; it is not a dependency: docs/quantization.md says why).
Printed per variant: test accuracy, top-1 agreement with fp32, and throughput at batch 1 and
batch 32 on one thread, the median of ``--rounds`` interleaved rounds, and the ratio to fp32 of
the same runtime.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_int8 --seconds 1 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from packager.build import build_bundles
from packager.bundle.reader import open_bundle
from tests.support.digits_cnn import (
    INPUT,
    OUTPUT,
    accuracy,
    export_onnx,
    load_digits_split,
    train_digits_cnn,
)

Run = Callable[[np.ndarray], np.ndarray]


def ort_runner(path: Path) -> Run:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return lambda x: sess.run([OUTPUT], {INPUT: x})[0]


def ov_runner(model: object) -> Run:
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {  # type: ignore[arg-type]
        "INFERENCE_NUM_THREADS": "1", "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32"})
    req = compiled.create_infer_request()
    port, out = compiled.inputs[0], compiled.outputs[0]

    def run(x: np.ndarray) -> np.ndarray:  # as the agent's backend runs it
        req.set_tensor(port, ov.Tensor(np.ascontiguousarray(x), shared_memory=True))
        req.infer()
        return req.get_tensor(out).data.copy()

    return run


def _artifact(bundle: Path, where: Path, backend: str) -> Path:
    with open_bundle(bundle) as r:
        root = r.extract(where)
        return root / r.manifest.artifacts[backend]


def build_variants(onnx_path: Path, calib: Path, work: Path) -> dict[str, Run]:
    """The runners, built as edge-pack builds them (plus the two comparison variants)."""
    def build(profile: str, calibration: Path | None = None) -> Path:
        [b] = build_bundles(onnx_path, name="digits", version=1, profiles=[profile],
                            out_dir=work / f"out-{profile}-{calibration is not None}",
                            calibration_data=calibration, allow_parity_failure=True)
        return b

    v: dict[str, Run] = {}
    v["ort fp32"] = ort_runner(_artifact(build("x86_64-cpu-onnxruntime"), work / "a",
                                         "onnxruntime"))
    try:
        import onnx
        from onnxconverter_common import float16

        half = float16.convert_float_to_float16(onnx.load(str(onnx_path)), keep_io_types=True)
        onnx.save(half, str(work / "fp16.onnx"))
        v["ort fp16 (comparison)"] = ort_runner(work / "fp16.onnx")
    except ImportError:
        print("onnxconverter-common is not installed: no ONNX Runtime fp16 variant")
    v["ort int8 dynamic"] = ort_runner(_artifact(build("x86_64-cpu-onnxruntime-int8"),
                                                 work / "b", "onnxruntime"))
    v["ort int8 static"] = ort_runner(_artifact(build("x86_64-cpu-onnxruntime-int8", calib),
                                                work / "c", "onnxruntime"))
    v["ov fp32"] = ov_runner(str(_artifact(build("x86_64-cpu-openvino"), work / "d",
                                           "openvino")))
    v["ov fp16 weights"] = ov_runner(str(_artifact(build("x86_64-cpu-openvino-fp16"),
                                                   work / "e", "openvino")))
    v["ov int8 static"] = ov_runner(str(_artifact(build("x86_64-cpu-openvino-int8", calib),
                                                  work / "f", "openvino")))
    try:
        import nncf
        import openvino as ov

        rows = np.load(calib)[INPUT]
        held = max(1, round(len(rows) * 0.2))
        t0 = time.perf_counter()
        q = nncf.quantize(ov.convert_model(str(onnx_path)),
                          nncf.Dataset([rows[i:i + 1] for i in range(len(rows) - held)]),
                          subset_size=len(rows) - held)
        print(f"nncf.quantize took {time.perf_counter() - t0:.1f} s")
        v["ov int8 nncf (comparison)"] = ov_runner(q)
    except ImportError:
        print("nncf is not installed: no NNCF variant")
    return v


def throughput(run: Run, x: np.ndarray, seconds: float) -> float:
    """Rows per second running ``x`` again and again for ``seconds``."""
    run(x)
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        run(x)
        n += 1
    return n * len(x) / elapsed


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="per variant, batch and round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median kept)")
    ap.add_argument("--channels", type=int, default=16, help="conv channels of the CNN")
    ap.add_argument("--epochs", type=int, default=6, help="training epochs")
    ap.add_argument("--upscale", type=int, default=3,
                    help="repeat each pixel NxN (8x8 digits are overhead-bound; 3: 24x24)")
    args = ap.parse_args(argv)

    data = load_digits_split(upscale=args.upscale)
    t0 = time.perf_counter()
    net = train_digits_cnn(data, epochs=args.epochs, channels=args.channels)
    side = data.x_train.shape[-1]
    print(f"trained a {args.channels}-channel digits CNN on {side}x{side} images in "
          f"{time.perf_counter() - t0:.0f} s")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        onnx_path = export_onnx(net, work / "digits.onnx")
        calib = work / "calib.npz"
        np.savez(calib, **{INPUT: data.x_calib})
        variants = build_variants(onnx_path, calib, work)
        ref = variants["ort fp32"](data.x_test).argmax(axis=1)
        rates: dict[str, dict[int, list[float]]] = {k: {1: [], 32: []} for k in variants}
        for _ in range(args.rounds):
            for name, run in variants.items():
                for b in (1, 32):
                    rates[name][b].append(throughput(run, data.x_test[:b], args.seconds))
        base = {rt: {b: statistics.median(rates[f"{rt} fp32"][b]) for b in (1, 32)}
                for rt in ("ort", "ov")}
        print(f"{'variant':28} {'accuracy':>8} {'top-1 vs fp32':>13} {'b1 rows/s':>10} "
              f"{'x fp32':>6} {'b32 rows/s':>10} {'x fp32':>6}")
        for name, run in variants.items():
            logits = np.concatenate([run(data.x_test[i:i + 32])
                                     for i in range(0, len(data.x_test), 32)])
            rt = name.split()[0]
            b1, b32 = (statistics.median(rates[name][b]) for b in (1, 32))
            print(f"{name:28} {accuracy(logits, data.y_test):8.3f} "
                  f"{(logits.argmax(axis=1) == ref).mean():13.3f} {b1:10.0f} "
                  f"{b1 / base[rt][1]:6.2f} {b32:10.0f} {b32 / base[rt][32]:6.2f}")


if __name__ == "__main__":
    main()
