"""Merging requests into one batch along dim 0 and splitting the outputs back, in order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def merge_inputs(
    requests: Sequence[dict[str, np.ndarray]], names: Sequence[str]
) -> dict[str, np.ndarray]:
    """One input dict whose arrays are the requests' arrays concatenated along dim 0.

    A single request is passed through untouched (no copy).
    """
    if len(requests) == 1:
        return requests[0]
    return {name: np.concatenate([r[name] for r in requests], axis=0) for name in names}


def split_outputs(
    outputs: dict[str, np.ndarray], rows: Sequence[int]
) -> list[dict[str, np.ndarray]]:
    """Per request output dicts: consecutive slices of ``rows[i]`` rows of every output.

    The slices are views of the batch outputs (no copy); each caller owns disjoint rows.
    """
    if len(rows) == 1:
        return [outputs]
    parts: list[dict[str, np.ndarray]] = [{} for _ in rows]
    for name, array in outputs.items():
        start = 0
        for part, n in zip(parts, rows, strict=True):
            end = start + n
            part[name] = array[start:end]
            start = end
    return parts
