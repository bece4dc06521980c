"""The benchmark's bound functions: PyTriton's anchor functions (``@batch``, ONNX Runtime once
per batch) for the MLP and squeezenet, with ``@signature`` so that the same module serves
in-process (``bench_inline.py``) and builds as bundles (``edge-pack build
benchmarks/inline_ort.py:mlp --name mlp ...``). The ONNX files are read from
``$EDGE_BENCH_MODELS`` (default /tmp/models, the anchor's ``make_models.py``)."""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from edge_agent.inline import Tensor, batch, signature

MAX_BATCH = 64
DELAY_US = 500


@functools.cache
def _session(file: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("EDGE_BENCH_THREADS", "0"))
    path = os.path.join(os.environ.get("EDGE_BENCH_MODELS", "/tmp/models"), file)
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


@signature(inputs=[Tensor("x", np.float32, (256,))], outputs=[Tensor("y", np.float32, (10,))],
           max_batch_size=MAX_BATCH, max_queue_delay_us=DELAY_US, instances=2)
@batch
def mlp(x: np.ndarray) -> dict[str, np.ndarray]:
    """The MLP, one ONNX Runtime run per batch."""
    return {"y": _session("mlp.onnx").run(["y"], {"x": x})[0]}


@signature(inputs=[Tensor("data_0", np.float32, (3, 224, 224))],
           outputs=[Tensor("softmaxout_1", np.float32, (1000, 1, 1))],
           max_batch_size=MAX_BATCH, max_queue_delay_us=DELAY_US, instances=2)
@batch
def squeezenet(data_0: np.ndarray) -> dict[str, np.ndarray]:
    """Squeezenet 1.1, one ONNX Runtime run per batch."""
    return {"softmaxout_1": _session("squeezenet.onnx").run(["softmaxout_1"],
                                                             {"data_0": data_0})[0]}
