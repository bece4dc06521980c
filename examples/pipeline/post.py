"""Post-processing step: class probabilities -> the top-3 labels (BYTES) and their scores."""

from __future__ import annotations

from typing import Any

import numpy as np

LABELS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
K = 3


def topk(inputs: dict[str, np.ndarray], ctx: Any) -> dict[str, np.ndarray]:
    """PROBS (FP32 [batch, 10]) -> LABELS (BYTES [batch, 3]), SCORES (FP32 [batch, 3])."""
    probs = inputs["PROBS"]
    order = np.argsort(-probs, axis=1, kind="stable")[:, :K]
    labels = np.array([[LABELS[i].encode() for i in row] for row in order], dtype=object)
    return {"LABELS": labels, "SCORES": np.take_along_axis(probs, order, axis=1)}
