"""The memory budget in resident memory (issue 28's scenario).

    PYTHONPATH=. python -m benchmarks.bench_budget                 # ~10 minutes, 201 MiB copies
    PYTHONPATH=. python -m benchmarks.bench_budget --pad-mib 80 --rounds 1
    PYTHONPATH=. python -m benchmarks.bench_budget --isolation process   # runtime processes

Three copies of a light squeezenet padded to ``--pad-mib`` MiB of weights (ONNX Runtime
profile, built with edge-pack), every model ``load = "on-demand"``, ``memory_budget_mib`` =
1.5 models (the load cost edge-pack build measured), 2 and then 8 callers cycling through the
three through the data plane the gRPC edge calls. Reported per run: requests, failures (with
their messages), the peak resident memory of this process and its runtime processes above
the empty agent (sampled at 100 Hz) against the budget, and the peak of the agent's own
accounting. Target: peak <= budget + 10 %, 0 failures.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.support.budget_scenario import MIB, install_copies, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pad-mib", type=float, default=201.0,
                    help="MiB of weights added to each copy (201: a 201 MiB model file)")
    ap.add_argument("--callers", default="2,8", help="comma-separated caller counts")
    ap.add_argument("--rounds", type=int, default=4,
                    help="passes over the three copies per caller")
    ap.add_argument("--work", type=Path, default=None, help="keep the built copies here")
    ap.add_argument("--isolation", default="auto", choices=("auto", "thread", "process"),
                    help="[models.NAME] isolation of the three copies")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-budget-") as tmp:
        work = args.work or Path(tmp)
        state, figure = install_copies(work, args.pad_mib)
        size = (work / "onnx" / f"padded_squeezenet_{args.pad_mib:g}.onnx").stat().st_size
        print(f"three copies of a {size / MIB:.0f} MiB CNN, load cost {figure / MIB:.0f} MiB "
              f"each; budget {figure * 1.5 / MIB:.0f} MiB (1.5 models)")
        worst = 0.0
        failed = 0
        for callers in (int(c) for c in args.callers.split(",")):
            t0 = time.monotonic()
            out = run(state, figure, callers, args.rounds, isolation=args.isolation)
            ratio = out.peak_above_empty / out.budget
            worst, failed = max(worst, ratio), failed + out.failed
            print(f"  {callers} callers: {out.requests} requests, {out.failed} failed; peak RSS "
                  f"above the empty agent {out.peak_above_empty / MIB:.0f} MiB = {ratio:.2f}x "
                  f"the budget; accounting peak {out.accounted_peak / MIB:.0f} MiB "
                  f"({time.monotonic() - t0:.0f} s)")
            for message, n in out.failures.most_common(5):
                print(f"    {n} x {message[:240]}")
        print(f"target (peak <= 1.10x budget, 0 failed): "
              f"{'met' if worst <= 1.10 and not failed else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
