"""The parity comparison on real arrays: tolerances, ties, NaN, shapes."""

from __future__ import annotations

import numpy as np

from packager.bundle.manifest import TensorSpec
from packager.bundle.parity import compare_outputs, seeded_inputs
from packager.bundle.profiles import ParityTolerance

TOL = ParityTolerance(atol=1e-3, rtol=1e-2, min_top1_agreement=1.0)


def test_within_and_past_tolerance():
    ref = np.linspace(-1, 1, 40, dtype=np.float32).reshape(4, 10)
    ok = compare_outputs(ref, ref + 5e-4, TOL, batched=True)
    assert ok["passed"] and ok["top1_agreement"] == 1.0 and ok["top1_rows"] == 4
    assert abs(ok["max_abs_error"] - 5e-4) < 1e-6
    bad = compare_outputs(ref, ref + 0.5, TOL, batched=True)
    assert not bad["passed"] and bad["out_of_tolerance"] == 40


def test_top1_disagreement_fails_and_ties_are_not_counted():
    ref = np.array([[0.1, 0.9], [0.6, 0.4], [0.5, 0.5]], dtype=np.float32)
    got = np.array([[0.1, 0.9], [0.4, 0.6], [0.5, 0.5]], dtype=np.float32)
    loose = ParityTolerance(atol=1.0, rtol=0.0, min_top1_agreement=1.0)
    # atol 1.0 makes every row a "tie": nothing to compare
    assert compare_outputs(ref, got, loose, batched=True)["top1_agreement"] is None
    rep = compare_outputs(ref, got, ParityTolerance(0.1, 0.0, 1.0), batched=True)
    assert rep["top1_rows"] == 2 and rep["top1_agreement"] == 0.5 and not rep["passed"]


def test_nan_and_shape_mismatch_fail():
    ref = np.ones((2, 3), dtype=np.float32)
    assert not compare_outputs(ref, ref * np.nan, TOL, batched=True)["passed"]
    assert "shape" in compare_outputs(ref, np.ones((3, 2)), TOL, batched=True)["error"]


def test_seeded_inputs_are_deterministic_and_typed():
    specs = (TensorSpec("x", "FP32", (-1, 3)), TensorSpec("ids", "INT64", (-1, -1)),
             TensorSpec("mask", "BOOL", (-1, 2)))
    a, b = seeded_inputs(specs, 4), seeded_inputs(specs, 4)
    assert a["x"].shape == (4, 3) and a["x"].dtype == np.float32
    assert a["ids"].shape == (4, 1) and a["ids"].dtype == np.int64
    assert a["mask"].dtype == np.bool_
    assert all(np.array_equal(a[k], b[k]) for k in a)
