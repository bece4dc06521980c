"""What a lying registry costs an agent (issue 27, "hostile registry fills the disk").

    python -m benchmarks.bench_hostile_registry                 # tmpfs state dir when root
    python -m benchmarks.bench_hostile_registry --disk-mib 512

An ``edge-agent serve`` subprocess whose state dir is a ``--disk-mib`` tmpfs (a plain temp dir
when mounting is not allowed) is asked to deploy by reference from a registry of our own on
127.0.0.1 (tests/registry/hostile_server.py) that:

1. declares a 1 GiB layer and streams zeros for as long as anyone reads;
2. stalls half-way through a real layer (the pull ends by its deadline, ``--pull-timeout``
   seconds when the agent knows ``[registry] pull_timeout_s``, else the per-read timeout);
3. stalls half-way and the agent gets SIGTERM.

Reported per case: seconds until the refusal (or the exit), bytes the registry sent, bytes
left in ``STATE_DIR/incoming/`` afterwards, and the refusal's gRPC status and first words.
Run it from another checkout (``PYTHONPATH=that tree``) for a before/after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@contextlib.contextmanager
def _state_dir(root: Path, mib: int) -> Iterator[tuple[Path, str]]:
    mount = root / "state"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0700", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    try:
        yield mount, (f"tmpfs {mib} MiB" if done.returncode == 0 else "temp dir (no tmpfs)")
    finally:
        if done.returncode == 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _left(state: Path) -> int:
    incoming = state / "incoming"
    return sum(p.stat().st_size for p in incoming.iterdir()) if incoming.exists() else 0


def main(argv: list[str] | None = None) -> int:
    """Run the three cases and print one row each."""
    from edge_agent.client.agent_client import ManagementError
    from packager.bundle.oci import layout as L
    from packager.bundle.oci.transfer import _bundle_info
    from tests.registry.hostile_server import Blob, HostileRegistry, labels
    from tests.support.bundles import PROFILE, build_all
    from tests.support.harness import AgentProcess

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--disk-mib", type=int, default=256)
    ap.add_argument("--pull-timeout", type=float, default=None,
                    help="[registry] pull_timeout_s (omit for an agent without the key)")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, HostileRegistry() as reg, \
            _state_dir(Path(tmp), args.disk_mib) as (state, disk):
        bundles = build_all(Path(tmp) / "bundles")
        data = bundles.mlp[1].read_bytes()
        config = Path(tmp) / "agent.toml"
        config.write_text(f"[registry]\nallow = [{json.dumps(reg.address)}]\n"
                          f"insecure = [{json.dumps(reg.address)}]\nretries = 1\n" + (
                              f"pull_timeout_s = {args.pull_timeout}\n"
                              if args.pull_timeout else ""))
        huge = 1 << 30
        refs = {
            "1 GiB declared": reg.put_bundle(
                "huge", L.Descriptor(L.BUNDLE_MEDIA_TYPE, L.digest_of(b"x"), huge, {}),
                labels("mlp", 9, PROFILE), Blob(length=huge, endless=True)),
            "stall mid-blob": reg.put_bundle(
                "stall", L.Descriptor(L.BUNDLE_MEDIA_TYPE, L.digest_of(data), len(data), {}),
                _bundle_info(bundles.mlp[1]), Blob(data, behaviour="stall",
                                                   cut=len(data) // 2)),
        }
        agent = AgentProcess(state, trust=bundles.public_key,
                             extra=["--no-mdns", "--config", str(config)]).start()
        try:
            for name, index in refs.items():
                sent0, t0 = reg.blob_bytes_sent, time.monotonic()
                try:
                    with agent.client() as c:
                        c.deploy_reference(f"oci://{reg.address}/edge/mlp@{index}")
                    outcome = "deployed"
                except ManagementError as exc:
                    outcome = f"{exc.status}: {str(exc).split(': ', 2)[-1][:70]}"
                rows.append((name, time.monotonic() - t0, reg.blob_bytes_sent - sent0,
                             _left(state), outcome))
            # SIGTERM mid-pull
            sent0 = reg.blob_bytes_sent
            caller = threading.Thread(target=_swallow, args=(
                agent, f"oci://{reg.address}/edge/mlp@{refs['stall mid-blob']}"), daemon=True)
            caller.start()
            deadline = time.monotonic() + 60
            while reg.blob_bytes_sent == sent0 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            assert agent.proc is not None
            t0 = time.monotonic()
            agent.proc.terminate()
            try:
                code = agent.proc.wait(120)
            except subprocess.TimeoutExpired:
                code = None
            rows.append(("SIGTERM mid-pull", time.monotonic() - t0,
                         reg.blob_bytes_sent - sent0, _left(state), f"exit {code}"))
        finally:
            agent.stop()
        print(f"state dir: {disk}; pull_timeout_s: {args.pull_timeout or 'not set'}")
        print(f"{'case':<18} {'seconds':>8} {'bytes sent':>12} {'left in incoming/':>18}  "
              "outcome")
        for name, secs, sent, left, outcome in rows:
            print(f"{name:<18} {secs:8.2f} {sent:12,} {left:18,}  {outcome}")
    return 0


def _swallow(agent: object, ref: str) -> None:
    with contextlib.suppress(Exception), agent.client() as c:  # type: ignore[attr-defined]
        c.deploy_reference(ref)


if __name__ == "__main__":
    raise SystemExit(main())
