"""A stateful Python model (spec ``[sequence]``): ``ctx.sequence_id``/``sequence_start``/
``sequence_end`` and a per-sequence ``ctx.state``, in the agent's process and in a runtime
process: a running sum per sequence, reset at START, dropped at END and when idle."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest, SequenceFlags
from edge_agent.errors import AgentError, InvalidInputError
from packager.bundle.errors import UsageError
from packager.spec_build import build_spec_bundles
from packager.triton_samples import write_python_example_models, write_python_spec
from tests.sequences.conftest import ORT, plane
from tests.support.eventually import eventually
from tests.support.processes import command_line

ACCUMULATE = '''
import numpy as np

def accumulate(inputs, ctx):
    seen = ctx.state.setdefault("seen", [])
    seen.append(int(inputs["INPUT"][0]))
    ctx.state["sum"] = ctx.state.get("sum", 0) + int(inputs["INPUT"][0])
    # the id back as a number (a string id: its length), then how many requests it saw
    sid = ctx.sequence_id if isinstance(ctx.sequence_id, int) else -len(ctx.sequence_id)
    return {"OUTPUT": np.array([ctx.state["sum"], sid, len(seen),
                                int(ctx.sequence_start), int(ctx.sequence_end)], np.int64)}
'''
IO = ['[[inputs]]\nname = "INPUT"\ndatatype = "INT32"\nshape = [1]\n',
      '[[outputs]]\nname = "OUTPUT"\ndatatype = "INT64"\nshape = [5]\n']


@pytest.fixture(scope="module")
def acc_bundles(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("python-sequence")
    paths = []
    for name in ("acc", "accp"):
        spec = write_python_spec(root / "src", name, module="accumulate", code=ACCUMULATE,
                                 entry="accumulate", io=IO)
        with spec.open("a") as f:
            f.write('\n[sequence]\nstrategy = "oldest"\nmax_sequence_idle_us = 300000\n'
                    'max_candidate_sequences = 8\n')
        paths += build_spec_bundles(spec, name=name, version=1, profiles=[ORT],
                                    out_dir=root / "out")
    return paths


@pytest.fixture
def dp(tmp_path: Path, acc_bundles: list[Path]) -> Iterator[DataPlane]:
    with plane(tmp_path, acc_bundles, overrides={
            "acc": ModelOverrides(isolation="thread"),
            "accp": ModelOverrides(isolation="process")}) as served:
        yield served


def _call(dp: DataPlane, model: str, value: int, seq: int | str, *, start: bool = False,
          end: bool = False) -> list[int]:
    request = InferRequest(model=model, inputs={"INPUT": np.array([value], np.int32)},
                           sequence=SequenceFlags(seq, start=start, end=end))
    return [int(x) for x in dp.infer(request).outputs["OUTPUT"]]


@pytest.mark.parametrize("model", ["acc", "accp"])
def test_python_accumulator_keeps_state_per_sequence(dp: DataPlane, model: str) -> None:
    assert _call(dp, model, 5, 1, start=True) == [5, 1, 1, 1, 0]
    assert _call(dp, model, 100, "abc", start=True) == [100, -3, 1, 1, 0]
    assert _call(dp, model, 7, 1) == [12, 1, 2, 0, 0]
    assert _call(dp, model, 1, "abc") == [101, -3, 2, 0, 0]
    # START on a live id: the state starts again
    assert _call(dp, model, 2, 1, start=True) == [2, 1, 1, 1, 0]
    assert _call(dp, model, 3, 1, end=True) == [5, 1, 2, 0, 1]
    # ended: a new sequence with that id starts from nothing
    assert _call(dp, model, 4, 1, start=True) == [4, 1, 1, 1, 0]
    # idle past max_sequence_idle_us: released by the agent, its state dropped
    eventually(lambda: dp.sequences.active(model) == 0, message="idle sequences were kept")
    with pytest.raises(InvalidInputError, match="must specify the START flag"):
        _call(dp, model, 1, "abc")
    assert _call(dp, model, 9, "abc", start=True) == [9, -3, 1, 1, 0]


def test_spec_sequence_needs_an_unbatched_single_instance_model(tmp_path: Path) -> None:
    spec = write_python_spec(tmp_path, "accb", module="accumulate", code=ACCUMULATE,
                             entry="accumulate", io=IO, max_batch_size=4)
    with spec.open("a") as f:
        f.write('\n[sequence]\nstrategy = "oldest"\n')
    with pytest.raises(UsageError, match="max_batch_size = 0"):
        build_spec_bundles(spec, name="accb", version=1, profiles=[ORT], out_dir=tmp_path)
    spec.write_text(spec.read_text().replace("max_batch_size = 4", "max_batch_size = 0")
                    .replace('"oldest"', '"newest"'))
    with pytest.raises(UsageError, match="'newest' is not one of direct, oldest"):
        build_spec_bundles(spec, name="accb", version=1, profiles=[ORT], out_dir=tmp_path)


def test_a_decoupled_model_refuses_a_sequence(tmp_path: Path) -> None:
    (repeat,) = [m for m in write_python_example_models(tmp_path / "src")
                 if m.name == "repeat_int32"]
    (bundle,) = build_spec_bundles(repeat.source, name=None, version=1, profiles=[ORT],
                                   out_dir=tmp_path / "out")
    with plane(tmp_path / "state", [bundle]) as served:
        request = InferRequest(model="repeat_int32", inputs={
            "IN": np.array([1], np.int32), "DELAY": np.array([0], np.uint32),
            "WAIT": np.array([0], np.uint32)}, sequence=SequenceFlags(3, start=True))
        with pytest.raises(InvalidInputError, match="not stateful"):
            served.stream(request)


def test_kill_9_of_the_runtime_process_never_serves_an_empty_state(dp: DataPlane) -> None:
    assert _call(dp, "accp", 5, 77, start=True)[0] == 5
    runtimes = [p for p in psutil.Process().children(recursive=True)
                if "edge_agent.backends.runtime_process" in " ".join(command_line(p))]
    assert runtimes, "accp runs in no runtime process"
    for p in runtimes:
        os.kill(p.pid, signal.SIGKILL)

    def refused() -> str:
        try:
            _call(dp, "accp", 1, 77)
        except AgentError as exc:
            return str(exc) if "start the sequence again" in str(exc) else ""
        raise AssertionError("a request was served after its state was lost")

    eventually(refused, message="the lost state was never reported")
    assert _call(dp, "accp", 2, 77, start=True)[0] == 2  # started again: served
    assert _call(dp, "accp", 3, 77)[0] == 5


def test_an_instances_override_above_one_is_refused_for_a_stateful_python_model(
        tmp_path: Path, acc_bundles: list[Path]) -> None:
    """ctx.state lives in the instance (a runtime process each): a sequence spread over two
    would lose it, so the agent refuses to load such a model rather than serve it wrong."""
    with plane(tmp_path, acc_bundles, overrides={
            "accp": ModelOverrides(isolation="process", instances=2)}) as served:
        with pytest.raises(AgentError, match="one instance") as refused:
            _call(served, "accp", 5, 1, start=True)
        assert "instances = 2" in str(refused.value) and "agent.toml" in str(refused.value)
        assert _call(served, "acc", 5, 1, start=True)[0] == 5  # the other model is served
