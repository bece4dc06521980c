"""ONNX Runtime session options that keep one copy of a model's weights in memory, for the
agent under a memory budget and for the build's load-cost measurement of the same sessions.

Measured with ONNX Runtime 1.32 (peak during the load / resident after one inference, above
the process before it; docs/performance.md "The memory budget in resident memory"):

- graph optimization ``ORT_ENABLE_ALL`` re-lays convolution weights out (NCHWc) as new
  initializers: a CNN with 180 MiB of conv weights kept 550 MiB; at ``ORT_ENABLE_EXTENDED``
  190 MiB, and from external data 10 MiB after the load, its weights mapped from the file;
- prepacking copies MatMul/Gemm weights into packed buffers: 200 MiB of MatMul weights from
  external data peaked at 409 MiB and kept 210 MiB anonymous; without prepacking the load
  peaked +8 MiB and the weights stayed mapped from the file (210 MiB resident once run);
- the CPU arena keeps what a batch took (+51 MiB after one batch of 8 of a 40 MiB CNN).

``onnxruntime`` is passed in: this module (part of ``packager.bundle``) imports no runtime.
"""

from __future__ import annotations

from typing import Any


def keep_one_copy(so: Any, ort: Any) -> None:
    """Set ``so`` (an ``ort.SessionOptions``) to keep one copy of the weights: no CPU arena, no
    prepacking, and graph optimization below the layout transforms."""
    so.enable_cpu_mem_arena = False
    so.add_session_config_entry("session.disable_prepacking", "1")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
