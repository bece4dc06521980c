"""Pre-processing step for a CNN: JPEG bytes -> ImageNet-normalised RGB 224x224 (Pillow).

Pillow must be installed on the device: the spec says ``requires = ["pillow"]``, so a deploy
to a device without it is refused, naming the distribution.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


def pixels(jpeg: bytes) -> np.ndarray:
    """One JPEG as the CNN's input: RGB, resized to 224x224 (bilinear), normalised, CHW."""
    with Image.open(io.BytesIO(jpeg)) as image:
        image.draft("RGB", (SIZE, SIZE))  # JPEG: decode at the smallest scale >= 224 (fast)
        rgb = image.convert("RGB").resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    return ((np.asarray(rgb, np.float32) - MEAN) / STD).transpose(2, 0, 1)


def preprocess(inputs: dict[str, np.ndarray], ctx: Any) -> dict[str, np.ndarray]:
    """JPEG (BYTES [batch, 1]) -> PIXELS (FP32 [batch, 3, 224, 224])."""
    return {"PIXELS": np.stack([pixels(bytes(row[0])) for row in inputs["JPEG"]])}
