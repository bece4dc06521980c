"""A hostile registry (issue 27): the agent is asked, again and again over its management API,
to deploy by reference from a registry that lies: a layer declared larger than the free disk
(zeros for as long as anyone reads), a transfer reset half-way, a redirect to a host the agent
was not told about, an index nested where a bundle's manifest belongs.

Every round must be refused without a byte of the huge layer, and ``STATE_DIR/incoming/`` must
be empty afterwards (counted as ``partial-left`` otherwise: the soak wants 0). The agent has to
allow the registry: start it with :data:`AGENT_ARGS` (the registry's port is fixed when this
module is imported; ``EDGE_HOSTILE_REGISTRY_PORT`` sets it). Bounded: one deploy at a time, a
pause between rounds, every server stopped on return.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

from benchmarks.attacks import Tally, Target, fixed_port
from packager.bundle.format import MAX_TOTAL_BYTES
from packager.bundle.oci import layout as L

PORT = fixed_port("EDGE_HOSTILE_REGISTRY_PORT")
REPOSITORY = "hostile/mlp"
AGENT_ARGS = ["--registry-allow", f"127.0.0.1:{PORT}/hostile", "--registry-insecure"]
"""``edge-agent serve`` flags that let the agent pull from this attack's registry."""
PAUSE_S = 0.5
CALL_S = 3.0  # a deploy by reference the attacker waits for at most
CLEANUP_S = 10.0  # how long a file of a failed pull may outlive its call


def _incoming(target: Target) -> set[str]:
    assert target.state_dir is not None
    incoming = target.state_dir / "incoming"
    return {p.name for p in incoming.iterdir()} if incoming.exists() else set()


def _is_upload(path: Path) -> bool:
    """Whether ``path`` holds a bundle (a tar: "ustar" at 257) as the soak's legitimate
    swapper uploads, not bytes of this registry's lies (zeros, random bytes)."""
    try:
        with path.open("rb") as f:
            f.seek(257)
            return f.read(5) == b"ustar"
    except OSError:  # gone meanwhile
        return True


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Deploy the lies below by reference until ``stop``; count how each ended."""
    from edge_agent.client.agent_client import ManagementError
    from tests.registry.hostile_server import Blob, HostileRegistry, labels

    if target.management is None or target.state_dir is None:
        tally.add("skipped: no management API")
        return
    with HostileRegistry(port=PORT) as reg, HostileRegistry("127.0.0.2") as elsewhere:
        info = labels("mlp", 90, "x86_64-cpu-onnxruntime")
        # past the free space when the disk is small enough (refused before a byte); on a
        # bigger disk 1 GiB trickled at 8 MiB/s, and the caller gives up after CALL_S: the
        # agent must drop what it pulled
        free = shutil.disk_usage(target.state_dir).free
        huge, rate = free + (1 << 30), 0
        if huge > MAX_TOTAL_BYTES:
            huge, rate = 1 << 30, 8 << 20
        data = os.urandom(256 << 10)
        digest = L.digest_of(data)
        lies = {
            "huge": reg.put_bundle("huge", L.Descriptor(L.BUNDLE_MEDIA_TYPE, L.digest_of(b"x"),
                                                        huge, {}), info,
                                   Blob(length=huge, endless=True, rate=rate)),
            "reset": reg.put_bundle("reset", L.Descriptor(L.BUNDLE_MEDIA_TYPE, digest,
                                                          len(data), {}), info,
                                    Blob(data, behaviour="reset", cut=len(data) // 2)),
        }
        elsewhere.blobs[L.digest_of(b"away")] = Blob(b"away")
        lies["redirect"] = reg.put_bundle(
            "redirect", L.Descriptor(L.BUNDLE_MEDIA_TYPE, L.digest_of(b"away"), 4, {}), info,
            Blob(behaviour="redirect", location=f"http://{elsewhere.address}/v2/x/blobs/"
                 f"{L.digest_of(b'away')}"))
        inner = reg.put_manifest(L.bundle_index([], "mlp", 90), L.INDEX_MEDIA_TYPE)
        lies["nested"] = reg.put_manifest(L.canonical({
            "schemaVersion": 2, "mediaType": L.INDEX_MEDIA_TYPE, "manifests": [
                {"mediaType": L.MANIFEST_MEDIA_TYPE, "digest": inner, "size": 10,
                 "annotations": info.annotations()}]}), L.INDEX_MEDIA_TYPE)
        with target.management_client(deploy_timeout_s=CALL_S) as client:
            while not stop.is_set():
                for name, index in lies.items():
                    if stop.is_set():
                        break
                    ref = f"oci://{reg.address}/{REPOSITORY}@{index}"
                    before = _incoming(target)
                    try:
                        client.deploy_reference(ref)
                        tally.add(f"{name}: deployed (a defect)")
                    except ManagementError as exc:
                        tally.add(f"{name}: {exc.status}")
                    new = _incoming(target) - before
                    deadline = time.monotonic() + CLEANUP_S  # a legitimate upload's too
                    while new & _incoming(target) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    assert target.state_dir is not None
                    for left in new & _incoming(target):
                        # a legitimate deploy that began during the call may outlast
                        # CLEANUP_S under the attacks' load: its file is not a pull's
                        tally.add("slow legitimate upload" if _is_upload(
                            target.state_dir / "incoming" / left) else "partial-left")
                    stop.wait(PAUSE_S)
        tally.add("huge-layer bytes sent", reg.blob_bytes_sent)
        tally.add("redirects followed", len(elsewhere.requests))
