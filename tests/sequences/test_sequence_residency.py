"""Idle unload and live sequences (a real DataPlane over ONNX Runtime): a version with a live
sequence is not idle, however long since its last request, so the orchestrator's idle sweep
keeps it loaded and the sequence goes on; once the sequence ends the sweep unloads it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest, SequenceFlags
from tests.sequences.conftest import SequenceBundles, plane
from tests.support.eventually import eventually


def _send(dp: DataPlane, value: int, *, start: bool = False, end: bool = False) -> int:
    request = InferRequest(model="seqmany", inputs={"INPUT": np.full((1, 1), value, np.int32)},
                           sequence=SequenceFlags(7, start=start, end=end))
    return int(dp.infer(request).outputs["OUTPUT"][0, 0])


def _loaded(dp: DataPlane) -> list[int]:
    return [mv.version for mv in dp.repository.versions("seqmany") if mv.state.value == "READY"]


def test_idle_sweep_keeps_a_version_with_a_live_sequence(tmp_path: Path,
                                                         seq_bundles: SequenceBundles) -> None:
    idle = {"seqmany": ModelOverrides(idle_unload_s=3600)}  # only the explicit sweeps below
    with plane(tmp_path, [seq_bundles.many], overrides=idle) as dp:
        assert _send(dp, 5, start=True) == 6  # OUTPUT = INPUT + START
        later = time.monotonic() + 7200  # far past idle_unload_s since the last request
        assert dp.orchestrator.sweep(now=later) == []
        assert _loaded(dp) == [1]
        assert _send(dp, 4) == 4  # the sequence goes on, on the same version
        assert _send(dp, 1, end=True) == 8  # INPUT + END * CORRID
        assert dp.orchestrator.sweep(now=time.monotonic() + 7200) == [("seqmany", 1)]
        eventually(lambda: _loaded(dp) == [], timeout=30)
