"""An app serving a model in its own process: no agent, no socket, no gRPC (edge_agent.embedded).

    # one bundle, signature checked against your release key
    python examples/embedded_app.py --bundle mlp-1-x86_64-cpu-onnxruntime.edgepkg \
        --trust keys/edge-pack.pub

    # the active versions of an agent's state directory (read-only; the agent may be running)
    python examples/embedded_app.py --state-dir /var/lib/edge-agent \
        --config /etc/edge-agent/agent.toml

Four threads infer at once (their requests share batches, as the agent's callers do); then a
wrong input shows the error an app gets. See docs/embedded.md.

Needs ``pip install 'edgeship[agent]'``.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

from edge_agent import embedded
from edge_agent.errors import AgentError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bundle", type=Path, help="an .edgepkg file or an extracted bundle dir")
    where.add_argument("--state-dir", type=Path, help="an agent's state directory")
    parser.add_argument("--config", type=Path, help="the agent's agent.toml (keys, settings)")
    parser.add_argument("--trust", type=Path, action="append", default=[],
                        help="a trusted public key (repeatable)")
    parser.add_argument("--allow-unsigned", action="store_true",
                        help="accept unsigned bundles that carry no code")
    parser.add_argument("--model", help="default: the first model served")
    args = parser.parse_args()
    try:
        if args.bundle is not None:
            rt = embedded.open_bundle(args.bundle, trusted_keys=args.trust,
                                      allow_unsigned=args.allow_unsigned)
        else:
            rt = embedded.open_state_dir(args.state_dir, config=args.config,
                                         trusted_keys=args.trust,
                                         allow_unsigned=args.allow_unsigned)
    except AgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with rt:
        model = args.model or rt.models()[0]
        spec = rt.metadata(model).inputs[0]
        shape = [1 if d < 0 else d for d in spec.shape]  # -1: the batch dimension
        answers: dict[int, dict[str, np.ndarray]] = {}

        def worker(i: int) -> None:
            x = np.random.default_rng(i).random(shape, dtype=np.float32)
            answers[i] = rt.infer(model, {spec.name: x})

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, outputs in sorted(answers.items()):
            for name, array in outputs.items():
                print(f"thread {i}: {model} {name} {list(array.shape)}: "
                      f"{np.array2string(array.ravel()[:4], precision=4)}")
        try:
            rt.infer(model, {spec.name: np.zeros([2, 3], np.float32)})
        except AgentError as exc:  # InvalidInputError: the message says what was expected
            print(f"a wrong input is refused: {type(exc).__name__}: {exc}")
        (stats,) = rt.statistics(model)
        print(f"{model}: {stats.inference_count} rows in {stats.execution_count} executions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
