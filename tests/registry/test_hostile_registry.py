"""A registry that lies to an agent (issue 27, "hostile registry fills the disk"): a layer
declared larger than the free space, bytes that do not match the declared size or digest, a
transfer reset or stalled mid-blob, redirects to hosts the agent was not told about, manifests
nested where a bundle's manifest belongs, and SIGTERM in the middle of a pull. Each is refused
with one clear line, and no partial file is left in ``STATE_DIR/incoming/``: a later deploy,
settings change or metrics write never meets a disk that a failed pull filled.

Real agent processes; the registry is a small HTTP server of the test's own on 127.0.0.1
(tests/registry/hostile_server.py) and, for redirects, two more on 127.0.0.2.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.client.agent_client import ManagementError
from packager.bundle.oci import layout as L
from packager.bundle.oci.transfer import _bundle_info
from tests.registry.hostile_server import Blob, HostileRegistry, hostile_registry, labels
from tests.support.bundles import PROFILE, Bundles
from tests.support.eventually import eventually
from tests.support.harness import AgentProcess
from tests.support.small_disk import tmpfs

pytestmark = pytest.mark.slow
PULL_TIMEOUT_S = 4


def _agent(root: Path, bundles: Bundles, allow: list[str], *, state: Path | None = None,
           pull_timeout_s: float = PULL_TIMEOUT_S) -> AgentProcess:
    root.mkdir(parents=True, exist_ok=True)
    config = root / "agent.toml"
    config.write_text(f"[registry]\nallow = {json.dumps(allow)}\n"
                      f"insecure = {json.dumps(allow)}\nretries = 1\n"
                      f"pull_timeout_s = {pull_timeout_s}\n")
    return AgentProcess(state or root / "state", trust=bundles.public_key,
                        extra=["--no-mdns", "--config", str(config)])


def _deploy(agent: AgentProcess, ref: str) -> ManagementError:
    """Deploy ``ref`` by reference; the refusal (the test fails if it deploys)."""
    with agent.client() as c, pytest.raises(ManagementError) as err:
        c.deploy_reference(ref)
    return err.value


def _left(agent: AgentProcess) -> list[str]:
    incoming = agent.state_dir / "incoming"
    return sorted(p.name for p in incoming.iterdir()) if incoming.exists() else []


def _real(reg: HostileRegistry, tag: str, bundle: Path, blob: Blob | None = None) -> str:
    """Serve ``bundle`` honestly (or as ``blob`` says) at ``tag``; the pinned reference."""
    data = bundle.read_bytes()
    layer = L.Descriptor(L.BUNDLE_MEDIA_TYPE, L.digest_of(data), len(data), {})
    digest = reg.put_bundle(tag, layer, _bundle_info(bundle), blob or Blob(data))
    return f"oci://{reg.address}/edge/mlp@{digest}"


@pytest.fixture(scope="module")
def site(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[HostileRegistry, AgentProcess]]:
    root = tmp_path_factory.mktemp("hostile")
    with hostile_registry() as reg, _agent(root, bundles, [reg.address]) as agent:
        yield reg, agent


LIES = {
    # the server sends more bytes than the manifest declares
    "longer": lambda data: (len(data) - 100, Blob(data), "more than the"),
    # the body ends short of the declared size, every time
    "shorter": lambda data: (len(data) + 1000, Blob(data, length=len(data) + 1000),
                             "registry: "),
    # the bytes are not the ones the digest names
    "digest": lambda data: (len(data), Blob(bytes(reversed(data))), "tampered or corrupt"),
    # a TCP reset half-way, on the first try and on the resumed one
    "reset": lambda data: (len(data), Blob(data, behaviour="reset", cut=len(data) // 2),
                           "registry: "),
    # half, then silence: the pull's deadline ends it (not the 30 s per read)
    "stall": lambda data: (len(data), Blob(data, behaviour="stall", cut=len(data) // 2),
                           "pull_timeout_s"),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_lying_layer_is_refused_and_leaves_no_partial_file(
        site: tuple[HostileRegistry, AgentProcess], bundles: Bundles, lie: str) -> None:
    reg, agent = site
    data = bundles.mlp[2].read_bytes()
    size, blob, says = LIES[lie](data)
    layer = L.Descriptor(L.BUNDLE_MEDIA_TYPE, L.digest_of(data), size, {})
    index = reg.put_bundle(lie, layer, _bundle_info(bundles.mlp[2]), blob)
    err = _deploy(agent, f"oci://{reg.address}/edge/mlp@{index}")
    assert says in str(err), err
    assert err.status != "INTERNAL"
    assert _left(agent) == []
    with agent.client() as c:
        assert 2 not in {v.version for v in c.models("mlp")}


def test_manifests_nested_where_a_bundle_belongs_are_refused_clearly(
        site: tuple[HostileRegistry, AgentProcess]) -> None:
    reg, agent = site
    info = labels("mlp", 1, PROFILE)
    inner = L.bundle_index([], "mlp", 1)
    inner_digest = reg.put_manifest(inner, L.INDEX_MEDIA_TYPE)
    # an index whose profile entry is another index
    entry = {"mediaType": L.MANIFEST_MEDIA_TYPE, "digest": inner_digest, "size": len(inner),
             "annotations": info.annotations()}
    outer = reg.put_manifest(L.canonical({"schemaVersion": 2, "mediaType": L.INDEX_MEDIA_TYPE,
                                          "manifests": [entry]}), L.INDEX_MEDIA_TYPE)
    # a manifest whose layer is a manifest
    nested = L.bundle_manifest(L.Descriptor(L.MANIFEST_MEDIA_TYPE, inner_digest, len(inner),
                                            {}), info, "2026-01-01T00:00:00Z")
    layered = reg.put_manifest(nested, L.MANIFEST_MEDIA_TYPE)
    # JSON nested deeper than any parser's stack
    deep = reg.put_manifest(b'{"layers":' + b"[" * 200_000 + b"]" * 200_000 + b"}",
                            L.MANIFEST_MEDIA_TYPE)
    for digest, says in ((outer, "an index where a bundle's image manifest is expected"),
                         (layered, "nested in a manifest"),
                         (deep, "nested too deeply")):
        err = _deploy(agent, f"oci://{reg.address}/edge/mlp@{digest}")
        assert err.status == "INVALID_ARGUMENT" and says in str(err), err
    assert _left(agent) == []


def test_redirects_are_followed_only_to_allowed_hosts(
        bundles: Bundles, tmp_path: Path) -> None:
    with hostile_registry() as reg, hostile_registry("127.0.0.2") as storage, \
            hostile_registry("127.0.0.2") as elsewhere, \
            _agent(tmp_path, bundles, [reg.address, storage.address]) as agent:
        data = bundles.mlp[1].read_bytes()
        digest = L.digest_of(data)
        for server in (storage, elsewhere):  # both would serve the right bytes
            server.blobs[digest] = Blob(data)
        path = f"/v2/edge/mlp/blobs/{digest}"
        ref = _real(reg, "away", bundles.mlp[1], Blob(
            behaviour="redirect", location=f"http://{elsewhere.address}{path}"))
        err = _deploy(agent, ref)
        assert elsewhere.address in str(err) and "[registry] allow" in str(err), err
        assert err.status == "FAILED_PRECONDITION", err
        assert elsewhere.requests == []  # never asked
        assert _left(agent) == []

        reg.blobs[digest] = Blob(behaviour="redirect",
                                 location=f"http://{storage.address}{path}")
        with agent.client() as c:
            assert c.deploy_reference(ref).ok
            assert [v.version for v in c.models("mlp") if v.active] == [1]
        assert storage.blob_requests() == [f"GET {path}"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs on ``tmp_path/state`` (skipped without root)."""
    with tmpfs(tmp_path / "state", 32 << 20) as mount:
        yield mount


def test_a_layer_larger_than_the_free_space_is_refused_before_a_byte(
        bundles: Bundles, small_disk: Path, tmp_path: Path) -> None:
    with hostile_registry() as reg, \
            _agent(tmp_path / "agent", bundles, [reg.address], state=small_disk) as agent:
        huge = 1 << 30  # 1 GiB of zeros, for as long as anyone reads
        layer = L.Descriptor(L.BUNDLE_MEDIA_TYPE, L.digest_of(b"never"), huge, {})
        index = reg.put_bundle("huge", layer, labels("mlp", 9, PROFILE),
                               Blob(length=huge, endless=True))
        err = _deploy(agent, f"oci://{reg.address}/edge/mlp@{index}")
        assert "the agent's disk is full" in str(err) and str(huge) in str(err), err
        assert err.status == "RESOURCE_EXHAUSTED"
        assert reg.blob_requests() == [] and reg.blob_bytes_sent == 0
        assert _left(agent) == []
        # the disk is not clogged: a real deploy and a live setting change still work
        with agent.client() as c:
            assert c.deploy_reference(_real(reg, "1", bundles.mlp[1])).ok
            assert c.set_model_settings("mlp", {"max_queue_delay_us": "200"}).ok
        assert _left(agent) == []


def test_a_caller_leaving_or_sigterm_ends_a_pull_and_leaves_no_partial_file(
        bundles: Bundles, tmp_path: Path) -> None:
    with hostile_registry() as reg:
        agent = _agent(tmp_path, bundles, [reg.address], pull_timeout_s=600).start()
        try:
            data = bundles.mlp[3].read_bytes()
            ref = _real(reg, "3", bundles.mlp[3], Blob(data, behaviour="stall",
                                                      cut=len(data) // 2))
            # the caller gives up (its deadline) while the registry is silent
            with agent.client(deploy_timeout_s=3.0) as c, \
                    pytest.raises(ManagementError, match="in time"):
                c.deploy_reference(ref)
            eventually(lambda: reg.blob_bytes_sent > 0 and not _left(agent), timeout=20,
                       message=lambda: f"left after the caller went away: {_left(agent)}")
            sent = reg.blob_bytes_sent
            errors: list[BaseException] = []

            def deploy() -> None:
                try:
                    with agent.client() as c:
                        c.deploy_reference(ref)
                except BaseException as exc:  # the agent going away ends the call
                    errors.append(exc)

            caller = threading.Thread(target=deploy)
            caller.start()
            eventually(lambda: reg.blob_bytes_sent > sent and _left(agent), timeout=60,
                       message="the pull never started")
            assert agent.proc is not None
            agent.proc.terminate()
            # within the unit's TimeoutStopSec (30 s); the pull's deadline is longer
            assert agent.proc.wait(timeout=30) == 0, "".join(agent.output)
            caller.join(timeout=60)
            assert errors, "the deploy did not fail"
        finally:
            agent.stop()
        assert _left(agent) == []


def test_the_soak_attack_tells_a_legitimate_upload_from_a_partial_pull(
        bundles: Bundles, tmp_path: Path) -> None:
    # the soak's hostile-registry attack counted the swapper's upload, still in incoming/
    # during a slow hot swap, as a pull's partial file; its lies are zeros and random bytes
    from benchmarks.attacks.hostile_registry import _is_upload

    upload = tmp_path / "upload-a.edgepkg"
    upload.write_bytes(bundles.mlp[1].read_bytes()[: 64 << 10])  # part-way received
    zeros, noise = tmp_path / "upload-b.edgepkg", tmp_path / "upload-c.edgepkg"
    zeros.write_bytes(bytes(128 << 10))
    noise.write_bytes(os.urandom(128 << 10))
    assert _is_upload(upload)
    assert not _is_upload(zeros) and not _is_upload(noise)
