"""Run one registered attack (benchmarks/attacks) alone against a fresh agent and print its tally.

    python -m benchmarks.bench_attack shm_deputy             # 5 s
    python -m benchmarks.bench_attack shm_deputy --seconds 10

The agent runs in this process (TCP on 127.0.0.1 port 0 and a Unix socket in a fresh /tmp
directory, no model deployed, defaults otherwise); the attack runs on a thread until the time
is up, then the tally is printed as JSON. The soak (benchmarks/bench_soak.py) runs them all.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from benchmarks.attacks import ATTACKS, Tally, Target, load
    from edge_agent.config import AgentConfig, GrpcConfig
    from tests.support.harness import run_configured

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("attack", choices=sorted(ATTACKS))
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="attack-", dir="/tmp"))  # a short socket path
    sock = work / "i.sock"
    agent = run_configured(AgentConfig(state_dir=work / "state", grpc=GrpcConfig(
        address="127.0.0.1:0", uds=sock, uds_enabled=True)))
    try:
        stop, tally = threading.Event(), Tally()
        thread = threading.Thread(target=load(args.attack), name=args.attack,
                                  args=(Target(grpc=agent.tcp, uds=sock,
                                               state_dir=work / "state"), stop, tally))
        thread.start()
        stop.wait(args.seconds)
        stop.set()
        thread.join(120)
        print(json.dumps({"attack": args.attack, "seconds": args.seconds,
                          "tally": dict(sorted(tally.counts.items()))}))
    finally:
        agent.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
