"""Stateful models for the sequence tests: Triton's ``simple_dyna_sequence`` signature (INT32
INPUT; START, END, READY INT32 and CORRID UINT64 control inputs filled by the agent;
``OUTPUT = (INPUT + START + END * CORRID) * READY``) built with edge-pack for each strategy."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edge_agent.core.dataplane import DataPlane
from packager.build import build_bundles
from packager.bundle.manifest import ControlInput, SequenceConfig
from packager.triton_samples import make_sequence
from tests.support.core_bundles import install

ORT = "x86_64-cpu-onnxruntime"
CONTROLS = tuple(ControlInput(kind, kind, "UINT64" if kind == "CORRID" else "INT32")
                 for kind in ("START", "END", "READY", "CORRID"))
IDLE_US = 300_000
SLOTS = 2


@dataclass(frozen=True)
class SequenceBundles:
    oldest: Path  # "seq": oldest strategy, SLOTS slots, idle IDLE_US
    direct: Path  # "seqd": direct strategy, SLOTS slots, idle IDLE_US
    many: Path  # "seqmany": oldest, 16 slots, a long idle time
    stateless: Path  # "plain": the same graph without a sequence batcher


@pytest.fixture(scope="session")
def seq_bundles(tmp_path_factory: pytest.TempPathFactory) -> SequenceBundles:
    root = tmp_path_factory.mktemp("sequence-bundles")
    onnx = make_sequence(root / "seq.onnx", dyna=True)

    def build(name: str, sequence: SequenceConfig | None) -> Path:
        (path,) = build_bundles(onnx, name=name, version=1, profiles=[ORT], out_dir=root,
                                max_batch=8, sequence=sequence)
        return path

    def short(strategy: str) -> SequenceConfig:
        return SequenceConfig(strategy, max_sequence_idle_us=IDLE_US,
                              max_candidate_sequences=SLOTS, control_inputs=CONTROLS)

    return SequenceBundles(
        oldest=build("seq", short("oldest")),
        direct=build("seqd", short("direct")),
        many=build("seqmany", SequenceConfig("oldest", max_sequence_idle_us=60_000_000,
                                             max_candidate_sequences=16,
                                             control_inputs=CONTROLS)),
        stateless=build("plain", None))


def make_accumulator(path: Path, factor: int = 1, keep_state: bool = True) -> Path:
    """An ONNX running sum with implicit state: INT32 INPUT, STATE_IN [batch, 1] ->
    OUTPUT = STATE_OUT = STATE_IN + factor * INPUT (``keep_state`` False: STATE_IN is read
    and dropped, OUTPUT = factor * INPUT)."""
    from onnx import TensorProto, helper

    from packager.samples import _save

    i32, shape = TensorProto.INT32, ["batch", 1]
    scale = helper.make_tensor("factor", i32, [], [factor])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT", "factor"], ["scaled"]),
         helper.make_node("Mul", ["STATE_IN", "keep"], ["kept"]),
         helper.make_node("Add", ["kept", "scaled"], ["OUTPUT"]),
         helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"])], "accumulator",
        [helper.make_tensor_value_info(n, i32, shape) for n in ("INPUT", "STATE_IN")],
        [helper.make_tensor_value_info(n, i32, shape) for n in ("OUTPUT", "STATE_OUT")],
        initializer=[scale, helper.make_tensor("keep", i32, [], [int(keep_state)])])
    return _save(graph, path, 17, producer="edge-toolkit-tests")


@contextlib.contextmanager
def plane(state: Path, bundles: list[Path], **options: Any) -> Iterator[DataPlane]:
    """A DataPlane (never on the caller's thread) serving ``bundles`` installed in ``state``;
    closed on exit."""
    for bundle in bundles:
        install(bundle, state)
    served = DataPlane(state, caller_runs=False, **options)
    try:
        yield served
    finally:
        served.close()
