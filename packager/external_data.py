"""ONNX Runtime artifacts with their weights as ONNX external data: ``model.onnx`` (the graph)
plus ``model.onnx.data`` (the initializers of 1 KiB or more, one after the other) beside it.

ONNX Runtime maps an external initializer from the file instead of copying it out of
the model's protobuf, so a load no longer peaks at twice what the model keeps (with the
session options of ``packager.bundle.ort_memory``; docs/performance.md "The memory budget in
resident memory"). Models with fewer weight bytes than :data:`THRESHOLD_BYTES` stay
single-file.
"""

from __future__ import annotations

from pathlib import Path

import onnx

THRESHOLD_BYTES = 8 << 20
"""Initializer bytes from which an artifact keeps its weights in a data file. Measured (a light
CNN padded with weights every inference reads; peak of the load / of load and one inference,
MiB above the process before): 2 MiB of weights 16/21 from one file, 14/20 from external data;
8 MiB 25/27 vs 14/26; 32 MiB 73/73 vs 14/50; 201 MiB 411/411 vs 13/219. Below ~8 MiB the
doubled load is lost in the session's own start-up and first run."""

DATA_SUFFIX = ".data"


def initializer_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the graph's initializers as stored (raw data or typed fields)."""
    return sum(t.ByteSize() for t in model.graph.initializer)


def externalize(entry: Path, threshold: int = THRESHOLD_BYTES) -> list[str]:
    """Rewrite ``entry`` with its initializers in ``entry.name + '.data'`` beside it when they
    hold at least ``threshold`` bytes; the data file names written (none: left single-file)."""
    model = onnx.load(str(entry))
    if initializer_bytes(model) < threshold:
        return []
    data = entry.name + DATA_SUFFIX
    onnx.save_model(model, str(entry), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=data, size_threshold=1024,
                    convert_attribute=False)
    return [data]
