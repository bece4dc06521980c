"""What a converter returns: one artifact of a bundle (backend, precision, entry, options)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Artifact:
    """One converted artifact: backend, entry file (relative to the bundle root), options."""

    backend: str
    precision: str
    entry: str
    options: dict[str, Any] = field(default_factory=dict)
    # what the build log should say about it, e.g. whether a TensorRT engine was prebuilt
    notes: list[str] = field(default_factory=list)
    # the files (relative to the bundle root) the entry keeps its weights in: ONNX external
    # data beside the entry (packager/external_data.py); empty for a single-file artifact
    external_data: tuple[str, ...] = ()
