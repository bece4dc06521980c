"""edge-pack build stores reference inputs and the source model's outputs in every bundle."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from packager.build import build_bundles
from packager.bundle.errors import UsageError
from packager.bundle.parity import (
    REFERENCE_FILE,
    load_reference,
    make_reference,
    onnxruntime_runner,
)
from packager.bundle.reader import open_bundle
from packager.onnx_tools import io_signature, load_model
from packager.samples import make_mlp
from tests.parity.bundles import PROFILE, ParityBundles


def _reference_of(bundle: Path, tmp: Path) -> tuple[str, list]:  # type: ignore[type-arg]
    with open_bundle(bundle) as reader:
        root = reader.extract(tmp / "x")
    return load_reference(root / REFERENCE_FILE)


def test_every_bundle_carries_signed_reference_data(parity_bundles: ParityBundles,
                                                    tmp_path: Path) -> None:
    bundle = parity_bundles.good[1]
    with open_bundle(bundle) as reader:
        reader.verify([parity_bundles.public_key])  # the signature covers its hash
        m = reader.manifest
        entry = next(f for f in m.files if f.path == REFERENCE_FILE)
    assert 0 < entry.size < 300 * 1024
    assert m.parity["reference"] == {"file": REFERENCE_FILE, "origin": "seeded",
                                     "batch_sizes": [1, 4], "bytes": entry.size}
    origin, cases = _reference_of(bundle, tmp_path)
    assert origin == "seeded" and [c.rows for c in cases] == [1, 4]
    source = ort.InferenceSession(str(_source(parity_bundles)),
                                  providers=["CPUExecutionProvider"])
    for case in cases:
        want = source.run(None, case.inputs)[0]
        np.testing.assert_array_equal(case.outputs["probs"], want)


def _source(b: ParityBundles) -> Path:
    return b.public_key.parent.parent / "mlp-1.onnx"


def test_real_inputs_replace_the_seeded_ones(tmp_path: Path) -> None:
    src = make_mlp(tmp_path / "m.onnx", seed=3)
    real = np.random.default_rng(9).uniform(0, 1, (6, 64)).astype(np.float32)
    np.savez(tmp_path / "real.npz", input=real)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "packager.cli", "build", str(src), "--name", "mlp", "--version",
         "1", "--profile", PROFILE, "--out", str(out), "--dynamic-batch", "--quiet",
         "--reference-data", str(tmp_path / "real.npz")],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (bundle,) = out.glob("*.edgepkg")
    origin, cases = _reference_of(bundle, tmp_path)
    assert origin == "real.npz"
    assert [c.rows for c in cases] == [1, 4]
    np.testing.assert_array_equal(cases[1].inputs["input"], real[:4])
    with open_bundle(bundle) as reader:
        assert reader.manifest.parity["reference"]["origin"] == "real.npz"


@pytest.mark.parametrize(("arrays", "words"), [
    ({"x": np.zeros((2, 64), np.float32)}, "missing: input, unknown: x"),
    ({"input": np.zeros((2, 63), np.float32)}, "has shape [2, 63]"),
    ({"input": np.zeros((2, 64), np.complex64)}, "is complex64"),
])
def test_bad_reference_data_is_one_clear_error_and_writes_nothing(
        tmp_path: Path, arrays: dict[str, np.ndarray], words: str) -> None:
    src = make_mlp(tmp_path / "m.onnx")
    np.savez(tmp_path / "bad.npz", **arrays)  # type: ignore[arg-type]
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="--reference-data") as info:
        build_bundles(src, name="mlp", version=1, profiles=[PROFILE], out_dir=out,
                      dynamic_batch=True, reference_data=tmp_path / "bad.npz")
    assert words in str(info.value) and "\n" not in str(info.value)
    assert list(out.iterdir()) == []


def test_a_missing_reference_file_is_a_usage_error(tmp_path: Path) -> None:
    src = make_mlp(tmp_path / "m.onnx")
    with pytest.raises(UsageError, match="no such file"):
        build_bundles(src, name="mlp", version=1, profiles=[PROFILE], out_dir=tmp_path / "o",
                      dynamic_batch=True, reference_data=tmp_path / "nope.npz")


def test_reference_cases_past_the_size_limit_are_left_out(tmp_path: Path) -> None:
    src = make_mlp(tmp_path / "m.onnx")
    inputs, _ = io_signature(load_model(src))
    run = onnxruntime_runner(src)
    one = make_reference(run, inputs, [1])[0].nbytes
    assert [c.rows for c in make_reference(run, inputs, [1, 4])] == [1, 4]
    assert [c.rows for c in make_reference(run, inputs, [1, 4], max_bytes=one)] == [1]
    assert make_reference(run, inputs, [1, 4], max_bytes=one - 1) == []


def test_inspect_says_what_reference_data_a_bundle_carries(parity_bundles: ParityBundles) -> None:
    def inspect(bundle: Path) -> str:
        proc = subprocess.run([sys.executable, "-m", "packager.cli", "inspect", str(bundle)],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "reference.npz: seeded inputs at batch sizes [1, 4]" in inspect(
        parity_bundles.good[1])
    assert "none (built before edge-pack stored it" in inspect(parity_bundles.old_format)
