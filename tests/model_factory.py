"""Real ONNX models for tests and benchmarks, built with onnx.helper (no downloads).

The MLP has random weights, so its outputs depend on its inputs: right for parity checks and
for "each caller gets its own rows". The light CNNs the onnx package ships are right for shapes,
conversion coverage and speed (their weights are constant fills).
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from packager.samples import make_mlp

__all__ = ["LIGHT_MODELS", "light_model_path", "make_mlp"]

LIGHT_MODELS = ("squeezenet", "shufflenet", "resnet50", "inception_v1", "densenet121")


def light_model_path(name: str) -> Path:
    """Path of one of the light CNNs in the installed onnx package (e.g. ``squeezenet``)."""
    base = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
    path = base / f"light_{name}.onnx"
    if not path.exists():
        raise FileNotFoundError(f"{path} is not in the installed onnx package")
    return path
