"""Bundles in an OCI registry, measured in one run on this machine:

1. push and pull throughput of a ~100 MB bundle to a local docker-registry (plain HTTP on
   127.0.0.1) against ``cp`` of the same file;
2. deploy to N agent processes on this machine by upload (``edge-console deploy FILE``) and by
   reference (``edge-console deploy oci://...``): the console's CPU time and the bytes it
   sent (counted by a TCP relay in front of each agent's management port).

Run: .venv/bin/python -m benchmarks.bench_registry [--push-mb 100] [--deploy-mb 20]
     [--agents 10] [--rounds 2]

Needs /usr/bin/docker-registry (scripts/system-deps.sh). The machine is shared: read the
ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.registry.registry_proc import BINARY, running_registry  # noqa: E402
from tests.support.harness import AgentProcess  # noqa: E402

TOKEN = "bench-registry-token-0123456789abcdef"


def _bundle(root: Path, mb: int, version: int) -> tuple[Path, Path]:
    """A signed bundle of an MLP whose first weight takes ~``mb`` MB; (bundle, public key)."""
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from packager.samples import make_mlp

    keys = root / "keys"
    if not (keys / "edge-pack.key").exists():
        generate_keypair(keys)
    in_features = 1024
    hidden = max(16, mb * 2**20 // (4 * in_features))
    src = make_mlp(root / f"big-{mb}-{version}.onnx", in_features=in_features, hidden=hidden,
                   seed=version)
    (bundle,) = build_bundles(src, name="big", version=version,
                              profiles=["x86_64-cpu-onnxruntime"], out_dir=root / f"out-{mb}",
                              key_path=keys / "edge-pack.key", dynamic_batch=True)
    return bundle, keys / "edge-pack.pub"


def _run(args: list[str], **kw: object) -> tuple[float, float]:
    """Run a command; (wall seconds, CPU seconds of the child)."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(args, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]  # kwargs pass through
    wall = time.perf_counter() - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system)
    return wall, cpu


def throughput(bundle: Path, registry: str, tmp: Path, rounds: int) -> None:
    size = bundle.stat().st_size
    mb = size / 1e6
    py = sys.executable
    best: dict[str, float] = {}
    for r in range(rounds):
        repo = f"oci://{registry}/bench/big{r}:1"  # a new repository: the blob is sent again
        out = tmp / f"pull-{r}"
        cp_to = tmp / f"cp-{r}.edgepkg"
        timings = {
            "cp": _run(["cp", str(bundle), str(cp_to)])[0],
            "push": _run([py, "-m", "packager.cli", "push", str(bundle), repo, "--insecure",
                          "-q"])[0],
            "pull": _run([py, "-m", "packager.cli", "pull", repo, "--out", str(out),
                          "--insecure", "-q"])[0],
        }
        for k, v in timings.items():
            best[k] = min(best.get(k, v), v)
        shutil.rmtree(out)
        cp_to.unlink()
    print(f"\n1. {mb:.0f} MB bundle, best of {rounds} (wall time of the whole command, "
          "Python start-up and hashing included)")
    for k in ("cp", "push", "pull"):
        print(f"   {k:<5} {best[k]:6.2f} s  {mb / best[k]:8.0f} MB/s  "
              f"x{best[k] / best['cp']:.1f} of cp")


class CountingRelay:
    """A TCP relay that counts the bytes its clients send."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.sent = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._sock.accept()
                threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)

        def pump(src: socket.socket, dst: socket.socket, count: bool) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(1 << 16):
                    if count:
                        with self._lock:
                            self.sent += len(data)
                    dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pump, args=(upstream, client, False), daemon=True)
        t.start()
        pump(client, upstream, True)
        t.join()
        client.close()
        upstream.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


@contextlib.contextmanager
def agents(root: Path, n: int, public_key: Path, registry: str) -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    try:
        for i in range(n):
            d = root / f"agent-{i}"
            (d / "state").mkdir(parents=True)
            (d / "state" / "management.token").write_text(TOKEN + "\n")
            (d / "state" / "management.token").chmod(0o600)
            (d / "agent.toml").write_text(f'[registry]\nallow = ["{registry}/bench"]\n'
                                          f'insecure = ["{registry}"]\n')
            started.append(AgentProcess(d / "state", trust=public_key, extra=[
                "--no-mdns", "--no-metrics", "--config", str(d / "agent.toml")]).start())
        yield started
    finally:
        for a in started:
            a.stop()


def deploys(bundle: Path, up: Path, public_key: Path, registry: str, tmp: Path,
            n: int) -> None:
    token = tmp / "token"
    token.write_text(TOKEN + "\n")
    size = bundle.stat().st_size
    subprocess.run([sys.executable, "-m", "packager.cli", "push", str(up),
                    f"oci://{registry}/bench/deploy:2", "--insecure", "-q"], check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)
    with agents(tmp / "agents", n, public_key, registry) as fleet:
        relays = [CountingRelay(a.management) for a in fleet]
        base = [sys.executable, "-m", "console.cli", "deploy"]
        flags = [x for r in relays for x in ("--agent", r.address)] + [
            "--token-file", str(token), "--insecure", "--json"]
        results = {}
        for label, what in (("upload", [str(bundle)]),
                            ("reference", [f"oci://{registry}/bench/deploy:2",
                                           "--registry-insecure"])):
            before = sum(r.sent for r in relays)
            wall, cpu = _run(base + what + flags)
            results[label] = (wall, cpu, sum(r.sent for r in relays) - before)
        for r in relays:
            r.close()
    print(f"\n2. deploy of a {size / 1e6:.0f} MB bundle to {n} agents on this machine "
          "(upload: version 1 to every agent; by reference: version 2 after it)")
    for label, (wall, cpu, sent) in results.items():
        print(f"   {label:<9} wall {wall:6.1f} s  console CPU {cpu:6.2f} s  "
              f"console sent {sent / 1e6:9.2f} MB")
    (uw, uc, us), (rw, rc, rs) = results["upload"], results["reference"]
    print(f"   by reference / by upload: console CPU x{rc / uc:.3f}, bytes sent "
          f"x{rs / max(us, 1):.5f}, wall x{rw / uw:.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_registry", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--push-mb", type=int, default=100, help="bundle size for push/pull (MB)")
    p.add_argument("--deploy-mb", type=int, default=20, help="bundle size for deploys (MB)")
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2, help="push/pull rounds (best kept)")
    args = p.parse_args(argv)
    if BINARY is None:
        print("bench_registry: needs docker-registry (scripts/system-deps.sh)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-registry-") as d:
        tmp = Path(d)
        print("building bundles...", flush=True)
        big, _ = _bundle(tmp, args.push_mb, 1)
        small, pub = _bundle(tmp, args.deploy_mb, 1)
        small2, _ = _bundle(tmp, args.deploy_mb, 2)
        with running_registry(tmp / "registry") as reg:
            throughput(big, reg.address, tmp, args.rounds)
            deploys(small, small2, pub, reg.address, tmp, args.agents)
    return 0


if __name__ == "__main__":
    sys.exit(main())
