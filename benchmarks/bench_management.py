"""Management API costs the README's "Measured figures" cite, on a real agent on loopback.

    python -m benchmarks.bench_management [--rounds N]

- TLS identity: creating the agent's key and self-signed certificate (an agent's first start)
  vs loading them (every later start), and fetching the certificate from a serving agent to pin
  it (what a console does at first contact).
- A deploy the agent would refuse (an unsigned bundle; the agent accepts only signed ones):
  asking first with CheckDeploy (manifest and signature sent) vs the refused upload itself.

Medians of ``--rounds`` calls; one agent (examples/demo.py's LocalAgent: loopback, mDNS off).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from edge_agent.client.agent_client import (
    AgentClient,
    ManagementError,
    PinnedTls,
    fetch_certificate,
)
from edge_agent.management.tls import fingerprint_of, load_or_create
from examples.demo import LocalAgent
from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from packager.samples import make_mlp

PROFILE = "x86_64-cpu-onnxruntime"


def median_ms(fn: Callable[[], object], rounds: int) -> float:
    """The median wall time of ``rounds`` calls of ``fn``, in milliseconds."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def refused_deploy(client: AgentClient, bundle: Path) -> None:
    """Upload ``bundle``; the agent must refuse it."""
    try:
        result = client.deploy(bundle)
    except ManagementError:
        return
    if result.ok:
        raise RuntimeError("the agent deployed an unsigned bundle it should refuse")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_management",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="calls per figure (default 20)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fresh = [root / f"fresh-{i}" for i in range(args.rounds)]
        for d in fresh:
            d.mkdir(mode=0o700)
        todo = iter(fresh)
        create_ms = median_ms(lambda: load_or_create(next(todo)), args.rounds)
        load_ms = median_ms(lambda: load_or_create(root / "fresh-0"), args.rounds)

        _, public = generate_keypair(root / "keys")
        model = make_mlp(root / "mlp.onnx")
        (bundle,) = build_bundles(model, name="mlp", version=1, profiles=[PROFILE],
                                  out_dir=root / "dist")  # unsigned: the agent refuses it
        size_kb = bundle.stat().st_size / 1e3
        agent = LocalAgent(root / "state", public)
        agent.start()
        try:
            fetch_ms = median_ms(lambda: fetch_certificate(agent.management), args.rounds)
            pin = PinnedTls(fingerprint_of(agent.state_dir))
            with AgentClient(agent.management, token=agent.token, tls=pin) as client:
                check = client.check_deploy(bundle)
                if check is None or check.ok:
                    raise RuntimeError(f"CheckDeploy did not refuse the unsigned bundle: {check}")
                check_ms = median_ms(lambda: client.check_deploy(bundle), args.rounds)
                upload_ms = median_ms(lambda: refused_deploy(client, bundle), args.rounds)
        finally:
            agent.stop()
    print(f"TLS identity: create (first start) {create_ms:.1f} ms, load (later starts) "
          f"{load_ms:.2f} ms; fetch the certificate to pin it {fetch_ms:.1f} ms")
    print(f"refused deploy of an unsigned bundle ({size_kb:.0f} KB): CheckDeploy "
          f"{check_ms:.2f} ms, the refused upload {upload_ms:.2f} ms (medians of {args.rounds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
