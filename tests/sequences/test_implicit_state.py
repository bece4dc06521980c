"""Implicit state for an ONNX model (``edge-pack build --state STATE_IN:STATE_OUT``): the agent
feeds each request of a sequence what the request before answered, zeros at START, keeps the
state tensors out of what callers send and get; a running sum under 16 concurrent sequences."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest, SequenceFlags
from edge_agent.errors import ModelNotFoundError
from packager.cli import main as edge_pack
from tests.sequences.conftest import ORT, make_accumulator, plane


def _build(root: Path, version: int, factor: int) -> Path:
    onnx = make_accumulator(root / f"acc{version}.onnx", factor)
    out = root / f"out{version}"
    assert edge_pack(["build", str(onnx), "--name", "sum", "--version", str(version),
                      "--profile", ORT, "--out", str(out), "--quiet", "--max-batch", "8",
                      "--sequence", "oldest", "--max-candidate-sequences", "16",
                      "--state", "STATE_IN:STATE_OUT"]) == 0
    (bundle,) = out.glob("*.edgepkg")
    return bundle


@pytest.fixture(scope="module")
def acc_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("implicit-state"), 1, 1)


@pytest.fixture
def dp(tmp_path: Path, acc_bundle: Path) -> Iterator[DataPlane]:
    with plane(tmp_path, [acc_bundle]) as served:
        yield served


def _sum(dp: DataPlane, value: int, seq: int, *, start: bool = False,
         end: bool = False) -> int:
    result = dp.infer(InferRequest(model="sum", inputs={"INPUT": np.full((1, 1), value,
                                                                        np.int32)},
                                   sequence=SequenceFlags(seq, start=start, end=end)))
    assert set(result.outputs) == {"OUTPUT"}  # the state output stays with the agent
    return int(result.outputs["OUTPUT"][0, 0])


def test_running_sum_reset_at_start(dp: DataPlane) -> None:
    assert [_sum(dp, v, 1, start=i == 0) for i, v in enumerate([3, 4, 5])] == [3, 7, 12]
    assert _sum(dp, 10, 2, start=True) == 10  # another sequence: its own state
    assert _sum(dp, 1, 1) == 13
    assert _sum(dp, 2, 1, start=True) == 2  # START again: zeros
    assert _sum(dp, 1, 2, end=True) == 11
    assert [i.name for i in dp.model_metadata("sum").inputs] == ["INPUT"]
    assert [o.name for o in dp.model_metadata("sum").outputs] == ["OUTPUT"]


def test_running_sums_of_16_concurrent_sequences(dp: DataPlane) -> None:
    _sixteen_sums(dp)


def test_running_sums_on_two_instances(tmp_path: Path, acc_bundle: Path) -> None:
    """The state travels with each request, so a sequence's steps may run on either
    instance and still add up."""
    with plane(tmp_path, [acc_bundle], overrides={"sum": ModelOverrides(instances=2)}) as dp:
        assert dp.model_config("sum").instances == 2
        _sixteen_sums(dp)


def _sixteen_sums(dp: DataPlane) -> None:
    steps = 10

    def one(seq: int) -> list[int]:
        futures = [dp.submit(InferRequest(
            model="sum", inputs={"INPUT": np.full((1, 1), seq * k, np.int32)},
            sequence=SequenceFlags(seq, start=k == 0, end=k == steps - 1)))
            for k in range(steps)]
        return [int(f.result(timeout=120).outputs["OUTPUT"][0, 0]) for f in futures]

    with ThreadPoolExecutor(16) as pool:
        sums = dict(zip(range(1, 17), pool.map(one, range(1, 17)), strict=True))
    for seq, got in sums.items():
        assert got == [seq * k * (k + 1) // 2 for k in range(steps)]


def test_model_config_shows_the_state(dp: DataPlane) -> None:
    from edge_agent.frontends.grpc.converters import to_model_config

    config = to_model_config(dp.model_config("sum"))
    (state,) = config.sequence_batching.state
    assert (state.input_name, state.output_name, list(state.dims)) == ("STATE_IN", "STATE_OUT",
                                                                       [1])
    assert [i.name for i in config.input] == ["INPUT"]
    assert [o.name for o in config.output] == ["OUTPUT"]


def test_inspect_shows_the_sequence(acc_bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert edge_pack(["inspect", str(acc_bundle)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "stateful: oldest, 16 slots" in shown and "state STATE_IN <-" in shown, shown


def test_a_live_sequence_keeps_its_version_across_a_swap(tmp_path: Path, acc_bundle: Path) -> None:
    doubling = _build(tmp_path, 2, 2)  # version 2 adds twice the input
    with plane(tmp_path / "state", [acc_bundle, doubling]) as served:
        served.repository.set_default("sum", 1)
        assert _sum(served, 3, 1, start=True) == 3
        served.repository.set_default("sum", 2)
        assert _sum(served, 4, 1) == 7  # version 1's sum, with version 1's state
        assert _sum(served, 4, 2, start=True) == 8  # a new sequence starts on version 2
        assert _sum(served, 1, 2) == 10
        served.repository.unload_version("sum", 1)
        # version 1 is gone: its sequence is refused, never served by version 2 with its state
        with pytest.raises(ModelNotFoundError, match="'sum' has no version 1"):
            _sum(served, 1, 1)
        assert _sum(served, 1, 2, end=True) == 12
