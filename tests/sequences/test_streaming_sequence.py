"""Sequences on a decoupled model (examples/streaming/listener.py): a response per frame,
state carried between a sequence's chunks, requests streamed in order; the example script runs
end to end against a real agent with tritonclient's start_stream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest, SequenceFlags
from edge_agent.errors import InvalidInputError
from packager.build import build_bundles
from tests.sequences.conftest import ORT, plane
from tests.support.examples import ROOT, run_example

EXAMPLE = ROOT / "examples" / "streaming"
FRAME = 160


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (bundle,) = build_bundles(EXAMPLE / "listener.toml", name="listener", version=1,
                              profiles=[ORT], out_dir=tmp_path_factory.mktemp("listener"))
    return bundle


@pytest.fixture(params=["thread", "process"])
def dp(request: pytest.FixtureRequest, tmp_path: Path, listener: Path) -> Iterator[DataPlane]:
    from edge_agent.config.models import ModelOverrides

    with plane(tmp_path, [listener],
               overrides={"listener": ModelOverrides(isolation=request.param)}) as served:
        yield served


def _chunk(dp: DataPlane, seq: int, samples: int, level: float, *, start: bool = False,
           end: bool = False) -> Iterator[tuple[int, str]]:
    audio = np.full(samples, level, np.float32)
    responses = dp.stream(InferRequest(model="listener", inputs={"AUDIO": audio},
                                       sequence=SequenceFlags(seq, start=start, end=end)))
    try:
        for r in responses:
            yield int(r.outputs["FRAME"][0]), r.outputs["TEXT"][0].decode()
    finally:
        responses.close()  # type: ignore[attr-defined]  # DataPlane.stream's iterator closes


def test_frames_straddle_chunks_per_sequence(dp: DataPlane) -> None:
    # 100 loud samples complete no frame: no response, the samples wait in the state
    assert list(_chunk(dp, 1, 100, 1.0, start=True)) == []
    assert list(_chunk(dp, 2, FRAME * 2, 0.0, start=True)) == [(0, "-"), (1, "--")]
    # 60 + 100 more: frame 0 of sequence 1 is complete (loud), 100 samples wait again
    assert list(_chunk(dp, 1, 160, 1.0)) == [(0, "#")]
    assert list(_chunk(dp, 2, FRAME, 1.0)) == [(2, "--#")]
    # END flushes the short last frame: the 100 loud samples waiting and 10 quiet ones
    assert list(_chunk(dp, 1, 10, 0.0, end=True)) == [(1, "##")]
    with pytest.raises(InvalidInputError, match="must specify the START flag"):
        list(_chunk(dp, 1, 10, 0.0))
    assert list(_chunk(dp, 1, FRAME, 0.0, start=True)) == [(0, "-")]  # a new sequence


def test_a_stream_closed_early_lets_the_sequence_go_on(dp: DataPlane) -> None:
    first = _chunk(dp, 5, FRAME * 3, 1.0, start=True)
    assert next(first) == (0, "#")
    # the next request of the sequence is queued behind the open stream
    second = _chunk(dp, 5, FRAME, 0.0)
    first.close()  # the caller went away: its generator stops, the sequence continues
    frame, text = next(second)
    assert frame >= 1 and text.startswith("#") and text.endswith("-"), (frame, text)


def test_the_streaming_example_runs(tmp_path: Path) -> None:
    out = run_example("examples/streaming/run.py", tmp_path / "w")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "listener: ok version 1 is active" in out.stdout
    assert out.stdout.count("the same transcript as computed offline: yes") == 2, out.stdout
