"""PyTriton's linear-model example, migrated to edge_agent.inline line by line
(docs/migrate-from-pytriton.md). Serve it::

    python examples/pytriton/linear.py --address 127.0.0.1:8001

and call it with the unmodified tritonclient (model "linear", input "x" FP32 [-1, 3], output
"y" FP32 [-1, 2]). Ship the same function to a device::

    edge-pack build examples/pytriton/linear.py:infer --name linear --version 1 \\
        --profile x86_64-cpu-onnxruntime --key keys/edge-pack.key --out dist/
"""

from __future__ import annotations

import numpy as np

from edge_agent.inline import Tensor, batch, serve_command, signature

WEIGHTS = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], dtype=np.float32)
BIAS = np.array([0.1, -0.2], dtype=np.float32)


@signature(inputs=[Tensor(name="x", dtype=np.float32, shape=(3,))],
           outputs=[Tensor(name="y", dtype=np.float32, shape=(2,))],
           max_batch_size=128, max_queue_delay_us=100)
@batch
def infer(x: np.ndarray) -> dict[str, np.ndarray]:
    """y = x W + b over the whole batch."""
    return {"y": x @ WEIGHTS + BIAS}


def main(argv: list[str] | None = None) -> None:
    """Serve ``infer`` as model "linear" until Ctrl-C or SIGTERM (--address, --uds, --http)."""
    serve_command({"linear": infer}, argv, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    main()
