"""Parity of a stateful model over a short sequence: the source model (ONNX Runtime, fp32) and
a converted artifact each run the same few requests, START on the first and END on the last,
each carrying its own implicit state from one request to the next (zeros at START) as the
agent does; every output of every step, the state outputs included, is compared. A
conversion that is close on one request but whose state drifts, or that mishandles the
control inputs, shows here rather than on a device in the middle of a stream."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packager.bundle.datatypes import NUMPY_DTYPES
from packager.bundle.manifest import SequenceConfig, TensorSpec
from packager.bundle.parity import SEED, Runner, compare_outputs, seeded_inputs
from packager.bundle.profiles import ParityTolerance

STEPS = 4
"""Requests in the parity sequence."""

CORRELATION_ID = 7
"""The sequence id given to a CORRID control input."""


def check_sequence(source: Runner, candidate: Runner, inputs: Sequence[TensorSpec],
                   sequence: SequenceConfig, batched: bool, tol: ParityTolerance,
                   seed: int = SEED) -> dict[str, Any]:
    """Run a ``STEPS``-request sequence (one row) through both; a report with ``passed``,
    the worst errors and each step's per-output comparison (``per_step``)."""
    controls = {c.name: c for c in sequence.control_inputs}
    states = {t.input_name: t.output_name for t in sequence.states}
    given = [t for t in inputs if t.name not in controls and t.name not in states]
    specs = {t.name: t for t in inputs}
    rows = 1 if batched else None
    kept: dict[str, dict[str, np.ndarray]] = {"source": {}, "candidate": {}}
    per_step: dict[str, Any] = {}
    passed, worst_abs, worst_rel = True, 0.0, 0.0
    for step in range(STEPS):
        feeds = seeded_inputs(given, rows, seed + step)
        flags = {"START": step == 0, "END": step == STEPS - 1, "READY": True}
        for name, c in controls.items():
            value: Any = CORRELATION_ID if c.kind == "CORRID" else flags[c.kind]
            if c.datatype == "BYTES":
                value = str(value).encode()
            feeds[name] = np.full(_shape(specs[name], rows), value,
                                  dtype=NUMPY_DTYPES[c.datatype])
        answers = {}
        for who, run in (("source", source), ("candidate", candidate)):
            carried = {name: kept[who].get(name) if step else None for name in states}
            answers[who] = run({**feeds, **{
                name: np.zeros(_shape(specs[name], rows), NUMPY_DTYPES[specs[name].datatype])
                if value is None else value for name, value in carried.items()}})
            kept[who] = {name: np.asarray(answers[who][out]) for name, out in states.items()
                         if out in answers[who]}
        outs: dict[str, Any] = {}
        for name, ref in answers["source"].items():
            got = answers["candidate"].get(name)
            outs[name] = ({"passed": False, "error": "output missing from the artifact"}
                          if got is None else
                          compare_outputs(np.asarray(ref), np.asarray(got), tol, batched))
            passed = passed and outs[name]["passed"]
            worst_abs = max(worst_abs, outs[name].get("max_abs_error", 0.0))
            worst_rel = max(worst_rel, outs[name].get("max_rel_error", 0.0))
        per_step[str(step)] = outs
    return {"passed": passed, "steps": STEPS, "max_abs_error": worst_abs,
            "max_rel_error": worst_rel, "per_step": per_step}


def _shape(spec: TensorSpec, rows: int | None) -> tuple[int, ...]:
    return tuple(rows if i == 0 and rows is not None else max(d, 1)
                 for i, d in enumerate(spec.shape))
