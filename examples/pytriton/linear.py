"""PyTriton's linear-model example, migrated to edge_agent.inline line by line
(docs/migrate-from-pytriton.md). Serve it::

    python examples/pytriton/linear.py --address 127.0.0.1:8001

and call it with the unmodified tritonclient (model "linear", input "x" FP32 [-1, 3], output
"y" FP32 [-1, 2]). Ship the same function to a device::

    edge-pack build examples/pytriton/linear.py:infer --name linear --version 1 \\
        --profile x86_64-cpu-onnxruntime --key keys/edge-pack.key --out dist/
"""

from __future__ import annotations

import argparse

import numpy as np

from edge_agent.inline import Tensor, batch, signature

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
    """Serve ``infer`` as model "linear" until Ctrl-C or SIGTERM."""
    from edge_agent.inline import FunctionServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1:8001", help="gRPC HOST:PORT")
    parser.add_argument("--http", default=None, help="HTTP HOST:PORT (KServe REST, /metrics)")
    args = parser.parse_args(argv)
    with FunctionServer(address=args.address, http=args.http) as server:
        server.bind(model_name="linear", infer_func=infer)
        print("serving on", " ".join(server.run().targets()),
              f"http {server.addresses.http}" if args.http else "", flush=True)
        server.serve()


if __name__ == "__main__":
    main()
