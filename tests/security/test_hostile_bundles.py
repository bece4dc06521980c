"""Hostile bundles through the agent's Deploy path (a real agent, the management client):
unsigned, untrusted key, any byte flipped, truncated, path traversal and links, bombs, manifests
that lie. Each is refused with a message saying why; nothing is written outside the staging
area, no version appears or changes, version 1 keeps serving."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from edge_agent.client.agent_client import AgentClient, ManagementError
from edge_agent.management.auth import bearer
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from packager.bundle.signing import generate_keypair
from tests.packager.test_reader_security import HOSTILE
from tests.packager.test_reader_security import _tar as hostile_tar
from tests.security import hostile
from tests.support.bundles import Bundles
from tests.support.harness import InProcessAgent, trusted_agent
from tests.support.traffic import served_version


@pytest.fixture(scope="module")
def agent(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessAgent]:
    with trusted_agent(tmp_path_factory.mktemp("hostile") / "state", bundles.public_key,
                       name="hostile", deploy=bundles.mlp[1]) as running:
        yield running


@pytest.fixture(scope="module")
def client(agent: InProcessAgent) -> Iterator[AgentClient]:
    with AgentClient(agent.management, token=agent.token) as c:
        yield c


def _snapshot(state: Path) -> dict[str, int]:
    """Every file the agent keeps besides its databases and its memory snapshot: relative path
    -> size. ``residency.json`` is a figure like the metrics (loads, unloads, measured memory):
    a refused version that was loaded for its probe counts one load and one unload there."""
    return {str(p.relative_to(state)): p.stat().st_size for p in state.rglob("*")
            if p.is_file() and ".db" not in p.name and p.name != "residency.json"}


def _refused(client: AgentClient, agent: InProcessAgent, bundle: Path,
             kept_failed: int | None = None) -> str:
    """Deploy ``bundle``; it must be refused and change nothing. Returns the reason.

    ``kept_failed``: a bundle that verified but failed to load stays on disk as that version,
    listed with stored state ``failed`` and its error (never active, never a rollback target,
    pruned first); only its own directory may appear."""
    state = agent.state_dir
    before = _snapshot(state)
    try:
        result = client.deploy(bundle)
    except ManagementError as exc:
        assert exc.status in ("INVALID_ARGUMENT", "FAILED_PRECONDITION"), exc
        message = str(exc)
    else:
        assert not result.ok, f"{bundle.name} was accepted"
        message = result.message
    after = _snapshot(state)
    if kept_failed is not None:
        prefix = f"models/mlp/{kept_failed}/"
        assert all(p.startswith(prefix) for p in set(after) - set(before))
        after = {p: n for p, n in after.items() if not p.startswith(prefix)}
        failed = [v for v in client.models() if v.version == kept_failed]
        assert [(v.stored_state, v.active) for v in failed] == [("failed", False)]
        assert failed[0].load_error
        assert client.remove("mlp", kept_failed).ok  # and it can be removed
    assert after == before  # no version, no upload, no staging dir left
    assert [(v.model, v.version, v.active) for v in client.models()] == [("mlp", 1, True)]
    for outside in (state.parent / "evil", state / "evil", Path("/tmp/evil")):
        assert not outside.exists(), outside
    assert served_version(agent.grpc)[0] == "1"
    # the message speaks of the user's file, never of the agent's internal upload path
    assert "incoming" not in message and "upload-" not in message, message
    return message


def _untrusted(b: Bundles, tmp: Path) -> Path:
    private, _public = generate_keypair(tmp / "stranger")
    return hostile.resigned(b.mlp[2], tmp / "stranger.edgepkg", private, lambda m: m)


CASES: dict[str, tuple[Callable[[Bundles, Path], Path | None], str]] = {
    "unsigned": (lambda b, t: b.unsigned, r"unsigned"),
    "untrusted-key": (_untrusted, r"signature|trusted"),
    "lying-shapes": (lambda b, t: hostile.resigned(b.mlp[2], t / "shape.edgepkg", b.private_key,
                                                   hostile.narrower_input),
                     r"(loaded|warm|probed).*(shape|input|dimension|32|64)"),
    "lying-sizes": (lambda b, t: hostile.resigned(b.mlp[2], t / "size.edgepkg", b.private_key,
                                                  hostile.wrong_sizes),
                    r"is \d+ bytes, the manifest says \d+"),
    "lying-hashes": (lambda b, t: hostile.resigned(b.mlp[2], t / "hash.edgepkg", b.private_key,
                                                   hostile.wrong_hashes),
                     r"does not match its manifest sha256"),
    "extra-manifest-key": (lambda b, t: hostile.manifest_with_extra_key(
        b.mlp[2], t / "extra.edgepkg", b.private_key), r"manifest|post_install"),
    "gzip-bomb": (lambda b, t: hostile.gzip_bomb(t / "bomb.edgepkg"), r"not a bundle"),
    "sparse-bomb": (lambda b, t: hostile.sparse_bomb(b.mlp[2], t / "sparse.edgepkg", t / "w"),
                    r"sparse file"),
    "declared-5-GiB": (lambda b, t: hostile.declared_huge(
        t / "huge.edgepkg", hostile.members(b.mlp[2])[0][1]), r"past the cap|truncated"),
    "10001-members": (lambda b, t: hostile.many_members(
        t / "many.edgepkg", hostile.members(b.mlp[2])[0][1]), r"more than 10000 members"),
    **{f"archive-{name}": (lambda b, t, name=name: hostile_tar(t / f"{name}.edgepkg",
                                                              HOSTILE[name][0]),
                           HOSTILE[name][1]) for name in sorted(HOSTILE)},
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_bundle_is_refused_and_changes_nothing(
        case: str, agent: InProcessAgent, client: AgentClient, bundles: Bundles,
        tmp_path: Path) -> None:
    build, why = CASES[case]
    bundle = build(bundles, tmp_path)
    if bundle is None:
        pytest.skip("GNU tar is needed to write a sparse member")
    message = _refused(client, agent, bundle, kept_failed=12 if case == "lying-shapes" else None)
    assert re.search(why, message, re.IGNORECASE), message


def test_any_flipped_byte_of_any_member_is_refused(agent: InProcessAgent, client: AgentClient,
                                                   bundles: Bundles, tmp_path: Path) -> None:
    src = bundles.mlp[2]
    data = src.read_bytes()
    with tarfile.open(src, "r:") as tar:
        layout = [(m.name, m.offset, m.offset_data, m.size) for m in tar.getmembers()]
    assert len(layout) >= 3
    for name, header, start, size in layout:
        for offset in (header + 100, start, start + size // 2, start + size - 1):
            flipped = bytearray(data)
            flipped[offset] ^= 0x01
            path = tmp_path / f"flip-{offset}.edgepkg"
            path.write_bytes(bytes(flipped))
            message = _refused(client, agent, path)
            assert re.search(r"signature|sha256|not a bundle|manifest|checksum", message,
                             re.IGNORECASE), (name, offset, message)
            if offset >= start and name != "manifest.sig" and name != "manifest.json":
                assert name in message, message  # the member that differs is named
            path.unlink()


def test_truncated_bundles_are_refused(agent: InProcessAgent, client: AgentClient,
                                       bundles: Bundles, tmp_path: Path) -> None:
    data = bundles.mlp[2].read_bytes()
    with tarfile.open(bundles.mlp[2], "r:") as tar:
        last = tar.getmembers()[-1]
    # past the end-of-archive marker there is only the tar record's zero padding
    end = last.offset_data + -(-last.size // 512) * 512 + 1024
    for cut in (1, 300, 512, 700, len(data) // 2, last.offset_data + 10, end - 1024, end - 1):
        path = tmp_path / f"cut-{cut}.edgepkg"
        path.write_bytes(data[:cut])
        message = _refused(client, agent, path)
        assert re.search(r"truncated|not a bundle", message), (cut, message)


def test_upload_header_beyond_the_cap_is_refused_before_any_byte(
        agent: InProcessAgent, client: AgentClient) -> None:
    before = _snapshot(agent.state_dir)
    with grpc.insecure_channel(agent.management) as channel:
        stub = pb_grpc.AgentManagementStub(channel)
        requests = iter([pb.DeployRequest(header=pb.DeployHeader(filename="x.edgepkg",
                                                                 size_bytes=17 << 30))])
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Deploy(requests, metadata=bearer(agent.token), timeout=30))
    assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "more than" in (err.value.details() or "")
    assert _snapshot(agent.state_dir) == before
