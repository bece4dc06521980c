"""Management API costs the README's "Measured figures" cite, on a real agent on loopback.

    python -m benchmarks.bench_management [--rounds N] [--attacks]

- TLS identity: creating the agent's key and self-signed certificate (an agent's first start)
  vs loading them (every later start), and fetching the certificate from a serving agent to pin
  it (what a console does at first contact).
- A deploy the agent would refuse (an unsigned bundle; the agent accepts only signed ones):
  asking first with CheckDeploy (manifest and signature sent) vs the refused upload itself.

- A management call (GetInfo on an open TLS connection): what the port's accept loop adds.
- ``--attacks`` (issue 27): operator calls answered (each from a fresh client on 127.0.0.1)
  while 1,000 silent connections from 127.0.0.2 are held; and wrong-token guesses answered per
  second to 64 parallel callers on connections of their own.

Medians of ``--rounds`` calls; one agent (examples/demo.py's LocalAgent: loopback, mDNS off).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc

from benchmarks.attacks.management_lockout import SilentConnections
from edge_agent.client.agent_client import (
    AgentClient,
    ManagementError,
    PinnedTls,
    fetch_certificate,
)
from edge_agent.management.auth import bearer
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from edge_agent.management.tls import SERVER_NAME, fingerprint_of, load_or_create
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


def operator_calls_under_lockout(agent: LocalAgent, pin: PinnedTls, calls: int = 34
                                 ) -> tuple[int, int, str]:
    """(answered, held, first error) of ``calls`` GetInfo calls, each from a fresh client,
    while 1,000 silent connections from 127.0.0.2 are held (and re-opened as closed)."""
    answered, first_error = 0, ""
    with SilentConnections(agent.management, 1000) as hostile:
        deadline = time.monotonic() + 60
        while hostile.opened < 1000 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)  # let the agent's caps and deadlines act
        for _ in range(calls):
            try:
                with AgentClient(agent.management, token=agent.token, tls=pin,
                                 timeout_s=10) as client:
                    client.info()
                answered += 1
            except ManagementError as exc:
                first_error = first_error or str(exc)
        held = hostile.held
    return answered, held, first_error


def wrong_token_guesses(agent: LocalAgent, callers: int = 64, seconds: float = 10.0
                        ) -> Counter[str]:
    """Status names of the answers ``callers`` parallel wrong-token callers (each on a
    connection of its own, each call with a 30 s deadline) got in ``seconds``."""
    cert = (agent.state_dir / "tls" / "cert.pem").read_bytes()
    creds = grpc.ssl_channel_credentials(root_certificates=cert)
    options = [("grpc.ssl_target_name_override", SERVER_NAME),
               ("grpc.use_local_subchannel_pool", 1)]
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def guess(i: int) -> None:
        with grpc.secure_channel(agent.management, creds, options=options) as channel:
            stub = pb_grpc.AgentManagementStub(channel)
            n = 0
            while time.monotonic() < end:
                n += 1
                try:
                    stub.GetInfo(pb.GetInfoRequest(), metadata=bearer(f"guess-{i}-{n}"),
                                 timeout=30)
                    code = "OK"
                except grpc.RpcError as exc:
                    code = exc.code().name
                if time.monotonic() <= end:
                    with lock:
                        outcomes[code] += 1

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_management",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="calls per figure (default 20)")
    parser.add_argument("--attacks", action="store_true",
                        help="also the lockout and parallel-guessing figures (issue 27)")
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
                client.info()
                info_ms = median_ms(client.info, max(args.rounds, 200))
            if args.attacks:
                answered, held, error = operator_calls_under_lockout(agent, pin)
                guesses = wrong_token_guesses(agent)
        finally:
            agent.stop()
    print(f"TLS identity: create (first start) {create_ms:.1f} ms, load (later starts) "
          f"{load_ms:.2f} ms; fetch the certificate to pin it {fetch_ms:.1f} ms")
    print(f"refused deploy of an unsigned bundle ({size_kb:.0f} KB): CheckDeploy "
          f"{check_ms:.2f} ms, the refused upload {upload_ms:.2f} ms (medians of {args.rounds})")
    print(f"GetInfo on an open TLS connection: {info_ms:.2f} ms "
          f"(median of {max(args.rounds, 200)})")
    if args.attacks:
        print(f"operator calls answered under 1,000 silent connections from 127.0.0.2: "
              f"{answered}/34 ({held} hostile connections open at the end)"
              + (f"; first error: {error}" if error else ""))
        rate = guesses["UNAUTHENTICATED"] / 10.0
        print(f"64 parallel wrong-token callers, 10 s: {rate:.1f} guesses answered per second "
              f"(answers: {dict(guesses)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
