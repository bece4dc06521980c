"""examples/pipeline/run.py runs end to end against a real agent subprocess."""

from __future__ import annotations

from pathlib import Path

from tests.support.examples import run_example


def test_the_pipeline_example_runs_and_matches_local_computation(tmp_path: Path) -> None:
    out = run_example("examples/pipeline/run.py", tmp_path / "w")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "classify: ok version 1 is active" in out.stdout
    assert out.stdout.count("  image ") == 4
    assert "the same labels as the steps computed here: yes" in out.stdout
