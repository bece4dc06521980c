"""Post-processing step: a CNN's class scores -> the top-5 labels (BYTES) and their scores."""

from __future__ import annotations

from typing import Any

import numpy as np

K = 5


def label(index: int) -> bytes:
    """The label of class ``index`` (a real app ships its label list among the sources)."""
    return f"class-{index}".encode()


def topk(inputs: dict[str, np.ndarray], ctx: Any) -> dict[str, np.ndarray]:
    """SCORES (FP32 [batch, 1000, 1, 1]) -> LABELS (BYTES [batch, 5]), TOP (FP32 [batch, 5])."""
    scores = inputs["SCORES"].reshape(len(inputs["SCORES"]), -1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    labels = np.array([[label(int(i)) for i in row] for row in order], dtype=object)
    return {"LABELS": labels, "TOP": np.take_along_axis(scores, order, axis=1)}
