"""What the soak's output amplifier costs the agent per call (issue 27): one ModelInferRequest
naming one output 20,000 times (~180 KB), through the gRPC deserializer the agent installs
(the typed-contents walk, then the parse), CPU time under the GIL, best and median of
``--calls`` per round. Optionally the same through another checkout's deserializer.

    PYTHONPATH=. python -m benchmarks.bench_amplifier [--before OLD_CHECKOUT] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _amplifier() -> bytes:
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

    request = pb.ModelInferRequest(model_name="mlp")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(np.zeros(16, np.float32).tobytes())
    for _ in range(20_000):
        request.outputs.add(name="probs")
    return request.SerializeToString()


def _deserializer(root: str | None) -> Callable[[bytes], Any]:
    """The agent's ModelInfer deserializer from ``root`` (None: this checkout)."""
    if root is not None:
        sys.path.insert(0, root)
        for name in [m for m in sys.modules if m.startswith("edge_agent")]:
            del sys.modules[name]
    handlers = importlib.import_module("edge_agent.frontends.grpc.handlers")
    budget = importlib.import_module("edge_agent.frontends.common.typed_budget")
    pb = importlib.import_module("edge_agent.frontends.grpc.generated.grpc_service_pb2")
    decode: Callable[[bytes], Any] = handlers.budgeted_deserializer(pb.ModelInferRequest.FromString,
                                            budget.TypedBudget(1 << 30), "ModelInferRequest")
    if root is not None:
        sys.path.remove(root)
    return decode


def _times(decode: Callable[[bytes], Any], data: bytes, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.process_time()
        decode(data)
        out.append((time.process_time() - t0) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="another checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    data = _amplifier()
    engines = {"this tree": _deserializer(None)}
    if args.before:
        engines["before"] = _deserializer(args.before)
    for r in range(args.rounds):
        line = []
        for label, decode in engines.items():
            ts = _times(decode, data, args.calls)
            line.append(f"{label} best {min(ts):.2f} ms median {statistics.median(ts):.2f} ms")
        print(f"round {r + 1}: " + "; ".join(line))
    print(f"{len(data)} bytes per call, CPU time per call")


if __name__ == "__main__":
    main()
