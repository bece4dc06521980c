"""Triton's classification extension: an output answered as its top-N classes.

A requested output with the parameter ``classification`` N (gRPC: on the
``InferRequestedOutputTensor``; HTTP: in the output's ``parameters``) is answered, instead of
the model's tensor, as a BYTES tensor of shape [batch, N] (batched models: the top N of each
row) or [N] (others), each element ``"<value>:<index>"`` or, when the bundle has labels for
that output (``edge-pack build --labels``), ``"<value>:<index>:<label>"``. Classes are ordered
by value, highest first (ties: the lower index first). N beyond the number of classes answers
them all. No gRPC or HTTP here: both front ends call :func:`classify`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from edge_agent.core.api import DataPlaneAPI
from edge_agent.core.types import InferResult
from edge_agent.errors import InvalidInputError


def _value(v: object) -> str:
    # C++ std::to_string, as Triton formats them: "%f" for floats, the integer for integers
    return f"{v:f}" if isinstance(v, float) else str(v)


def top_classes(array: np.ndarray, count: int, labels: Sequence[str], batched: bool,
                name: str) -> np.ndarray:
    """The classification tensor of output ``name`` (an object array of bytes)."""
    if array.dtype.kind not in "biuf":
        raise InvalidInputError(f"output '{name}' is {array.dtype} data, not numbers: it "
                                "cannot be answered as classes; ask for the tensor")
    rows = array.reshape(len(array), -1) if batched and array.ndim else array.reshape(1, -1)
    k = min(count, rows.shape[1])
    order = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    out = np.empty((len(rows), k), dtype=object)
    for r, indices in enumerate(order):
        for c, index in enumerate(indices.tolist()):
            text = f"{_value(rows[r, index].item())}:{index}"
            if index < len(labels):
                text += f":{labels[index]}"
            out[r, c] = text.encode()
    return out if batched and array.ndim else out.reshape(k)


def classify(result: InferResult, classes: Mapping[str, int],
             dataplane: DataPlaneAPI) -> InferResult:
    """``result`` with each output of ``classes`` (name -> N) answered as its top N, labelled
    with the labels of the model version that answered."""
    if not classes:
        return result
    manifest = dataplane.model_config(result.model, result.version).manifest
    labels, batched = manifest.labels, manifest.batched
    outputs = dict(result.outputs)
    for name, count in classes.items():
        if count and name in outputs:
            outputs[name] = top_classes(outputs[name], count, labels.get(name, ()), batched,
                                        name)
    return dataclasses.replace(result, outputs=outputs)
