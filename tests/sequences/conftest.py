"""Stateful models for the sequence tests: Triton's ``simple_dyna_sequence`` signature (INT32
INPUT; START, END, READY INT32 and CORRID UINT64 control inputs filled by the agent;
``OUTPUT = (INPUT + START + END * CORRID) * READY``) built with edge-pack for each strategy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from packager.build import build_bundles
from packager.bundle.manifest import ControlInput, SequenceConfig
from packager.triton_samples import make_sequence

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

    short = dict(max_sequence_idle_us=IDLE_US, max_candidate_sequences=SLOTS,
                 control_inputs=CONTROLS)
    return SequenceBundles(
        oldest=build("seq", SequenceConfig("oldest", **short)),  # type: ignore[arg-type]
        direct=build("seqd", SequenceConfig("direct", **short)),  # type: ignore[arg-type]
        many=build("seqmany", SequenceConfig("oldest", max_sequence_idle_us=60_000_000,
                                             max_candidate_sequences=16,
                                             control_inputs=CONTROLS)),
        stateless=build("plain", None))
