"""Pre-processing step: EPI image bytes -> the MLP's 64 normalised features (8x8 grey)."""

from __future__ import annotations

from typing import Any

import numpy as np
from imaging import decode, resize

SIZE = 8


def features(image: bytes) -> np.ndarray:
    """One image's features: decoded, resized to 8x8, scaled to [-1, 1], flattened."""
    return (resize(decode(image), SIZE) / 127.5 - 1.0).reshape(-1).astype(np.float32)


def preprocess(inputs: dict[str, np.ndarray], ctx: Any) -> dict[str, np.ndarray]:
    """IMAGE (BYTES [batch, 1]) -> FEATURES (FP32 [batch, 64])."""
    images = inputs["IMAGE"]
    return {"FEATURES": np.stack([features(bytes(row[0])) for row in images])}
