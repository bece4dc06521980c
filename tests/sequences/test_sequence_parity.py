"""The packager's parity check runs a short sequence for a stateful model: source and artifact
each carry their own implicit state from request to request, and every output of every step
is compared (the state outputs included)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np

from packager.bundle.manifest import SequenceConfig, StateSpec
from packager.bundle.parity import onnxruntime_runner
from packager.bundle.profiles import ParityTolerance
from packager.onnx_tools import io_signature, load_model
from packager.sequence_parity import STEPS, check_sequence
from packager.triton_samples import make_sequence
from tests.sequences.conftest import CONTROLS, make_accumulator

SEQUENCE = SequenceConfig("oldest", states=(StateSpec("STATE_IN", "STATE_OUT"),))
TOL = ParityTolerance(atol=1e-5, rtol=1e-4)


def test_a_stateful_build_records_the_sequence_check(tmp_path: Path) -> None:
    from packager.cli import main as edge_pack

    onnx = make_accumulator(tmp_path / "acc.onnx")
    assert edge_pack(["build", str(onnx), "--name", "acc", "--version", "1", "--profile",
                      "x86_64-cpu-onnxruntime", "--out", str(tmp_path / "out"), "--quiet",
                      "--max-batch", "4", "--sequence", "oldest",
                      "--state", "STATE_IN:STATE_OUT"]) == 0
    (bundle,) = (tmp_path / "out").glob("*.edgepkg")
    with tarfile.open(bundle) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        parity = json.loads(member.read())["parity"]
    reports = parity["artifacts"]
    assert reports and parity["passed"]
    for report in reports.values():
        sequence = report["sequence"]
        assert sequence["passed"] and sequence["steps"] == STEPS
        assert set(sequence["per_step"]) == {str(i) for i in range(STEPS)}
        assert set(sequence["per_step"]["0"]) == {"OUTPUT", "STATE_OUT"}


def test_a_candidate_that_loses_its_state_fails_after_the_first_step(tmp_path: Path) -> None:
    source = make_accumulator(tmp_path / "acc.onnx")
    inputs, _ = io_signature(load_model(source))
    forgetful = tmp_path / "forgetful.onnx"
    make_accumulator(forgetful, factor=1, keep_state=False)
    report = check_sequence(onnxruntime_runner(source), onnxruntime_runner(forgetful), inputs,
                            SEQUENCE, batched=True, tol=TOL)
    assert not report["passed"]
    steps = report["per_step"]
    assert steps["0"]["OUTPUT"]["passed"]  # from zeros, both agree
    assert not steps["1"]["OUTPUT"]["passed"]  # then the forgetful one drops the sum
    same = check_sequence(onnxruntime_runner(source), onnxruntime_runner(source), inputs,
                          SEQUENCE, batched=True, tol=TOL)
    assert same["passed"] and same["max_abs_error"] == 0.0


def test_control_inputs_are_fed(tmp_path: Path) -> None:
    onnx = make_sequence(tmp_path / "seq.onnx", dyna=True)
    inputs, _ = io_signature(load_model(onnx))
    run = onnxruntime_runner(onnx)
    seen: list[dict[str, int]] = []

    def recording(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        seen.append({k: int(v.reshape(-1)[0]) for k, v in feeds.items() if k != "INPUT"})
        return run(feeds)

    report = check_sequence(run, recording, inputs, SequenceConfig("oldest",
                            control_inputs=CONTROLS), batched=True, tol=TOL)
    assert report["passed"]
    assert [s["START"] for s in seen] == [1, 0, 0, 0]
    assert [s["END"] for s in seen] == [0, 0, 0, 1]
    assert {s["READY"] for s in seen} == {1} and {s["CORRID"] for s in seen} == {7}
