"""Bundles in OCI registries: push the bundles of one model version (one manifest per
profile, an index over them at the tag), resolve a tag to the index's digest, and pull one
profile's bundle (or every profile) back, every digest checked.

Used by ``edge-pack push/pull``, the console (resolve) and the agent (pull for its profile).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packager.bundle.errors import (
    ArtifactNotFoundError,
    ArtifactRejectedError,
    PackagerError,
    RegistryError,
    RegistryUnavailableError,
    UsageError,
)
from packager.bundle.format import MAX_TOTAL_BYTES
from packager.bundle.oci import layout as L
from packager.bundle.oci.client import Progress, RegistryClient, RegistryOptions
from packager.bundle.oci.ref import OciReference
from packager.bundle.reader import open_bundle


@dataclass(frozen=True)
class PushedBundle:
    """One profile's bundle as pushed."""

    path: Path
    info: L.BundleInfo
    manifest_digest: str
    blob_digest: str
    size: int
    uploaded: bool  # False: the registry had the blob already


@dataclass(frozen=True)
class PushResult:
    """The index pushed at the tag and the bundles in it."""

    reference: OciReference  # pinned to the index's digest
    bundles: tuple[PushedBundle, ...]
    profiles: tuple[str, ...]  # every profile the index lists (earlier pushes included)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _bundle_info(path: Path) -> L.BundleInfo:
    with open_bundle(path) as reader:
        reader.verify_files()  # push nothing that an agent would refuse as corrupt
        m = reader.manifest
        sig = (hashlib.sha256(reader.signature).hexdigest() if reader.signature is not None
               else L.UNSIGNED)
        return L.BundleInfo(m.name, m.version, m.profile, m.arch, m.backend,
                            hashlib.sha256(reader.manifest_bytes).hexdigest(), sig)


def _created() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    t = int(epoch) if epoch and epoch.isdigit() else int(time.time())
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def push_bundles(paths: Sequence[Path], ref: OciReference, options: RegistryOptions, *,
                 on_progress: Callable[[Path, int, int], None] | None = None) -> PushResult:
    """Push the bundles (one model version, distinct profiles) and an index at ``ref``'s
    tag. An index already at the tag for the same name and version keeps its other
    profiles; one for another model or version is replaced."""
    if not ref.tag or ref.digest:
        raise UsageError(f"{ref}: push to a tag (oci://HOST/REPO:TAG), not a digest")
    infos = [(Path(p), _bundle_info(Path(p))) for p in paths]
    if not infos:
        raise UsageError("give at least one bundle to push")
    name, version = infos[0][1].name, infos[0][1].version
    profiles: dict[str, Path] = {}
    for p, info in infos:
        if (info.name, info.version) != (name, version):
            raise UsageError(f"{p}: {info.name} version {info.version}; one push holds one "
                             f"model version ({name} version {version}): push it to its own tag")
        if info.profile in profiles:
            raise UsageError(f"{p} and {profiles[info.profile]} are both for profile "
                             f"{info.profile}; give one bundle per profile")
        profiles[info.profile] = p
    client = RegistryClient(ref, options)
    created = _created()
    client.put_blob_bytes(L.EMPTY_CONFIG, L.EMPTY_MEDIA_TYPE)
    pushed: list[PushedBundle] = []
    entries: dict[str, dict[str, Any]] = {}
    for p, info in infos:
        digest, size = _file_sha256(p), p.stat().st_size
        uploaded = client.put_blob(p, digest, size, L.BUNDLE_MEDIA_TYPE,
                                   _bind(on_progress, p))
        layer = L.Descriptor(L.BUNDLE_MEDIA_TYPE, digest, size, {L.TITLE: p.name})
        manifest = L.bundle_manifest(layer, info, created)
        mdigest = client.put_manifest(manifest, L.MANIFEST_MEDIA_TYPE, L.digest_of(manifest))
        entries[info.profile] = L.index_entry(manifest, info)
        pushed.append(PushedBundle(p, info, mdigest, digest, size, uploaded))
    for old in _existing_entries(client, ref.tag, name, version):
        entries.setdefault(old["annotations"][L.PROFILE], old)
    index = L.bundle_index(list(entries.values()), name, version)
    digest = client.put_manifest(index, L.INDEX_MEDIA_TYPE, ref.tag)
    return PushResult(ref.with_digest(digest), tuple(pushed), tuple(sorted(entries)))


def _bind(on_progress: Callable[[Any, int, int], None] | None, key: Any) -> Progress | None:
    """``on_progress`` with its first argument bound (None stays None)."""
    if on_progress is None:
        return None
    report = on_progress
    return lambda got, total: report(key, got, total)


def _existing_entries(client: RegistryClient, tag: str, name: str, version: int
                      ) -> list[dict[str, Any]]:
    """The profile entries of the index at ``tag`` when it is for ``name`` ``version``."""
    try:
        data, media_type, _ = client.get_manifest(tag)
    except ArtifactNotFoundError:
        return []
    if media_type != L.INDEX_MEDIA_TYPE:
        return []
    index = L.parse_json(data, f"{client.ref}")
    ann = index.get("annotations") or {}
    if not isinstance(ann, dict) or ann.get(L.NAME) != name or ann.get(L.VERSION) != str(
            version):
        return []
    kept = {d.digest for d in L.index_entries(index, str(client.ref))}  # checked entries
    keys = ("mediaType", "digest", "size", "artifactType", "platform", "annotations")
    return [{k: e[k] for k in keys if k in e} for e in index["manifests"]
            if isinstance(e, dict) and e.get("digest") in kept]


@dataclass(frozen=True)
class Resolved:
    """A reference resolved to the digest of what it names, and the bundles it holds."""

    reference: OciReference  # pinned
    entries: tuple[L.Descriptor, ...]  # the profiles' manifests (one for a plain manifest)
    name: str
    version: int


def resolve(ref: OciReference, options: RegistryOptions) -> Resolved:
    """Fetch what ``ref`` names (an index, or one profile's manifest) and pin its digest."""
    client = RegistryClient(ref, options)
    data, media_type, digest = client.get_manifest(ref.reference)
    return _read_top(ref.with_digest(digest), data, media_type)


def _read_top(ref: OciReference, data: bytes, media_type: str) -> Resolved:
    where = str(ref)
    obj = L.parse_json(data, where)
    kind = obj.get("mediaType") or media_type
    if kind == L.INDEX_MEDIA_TYPE:
        entries = L.index_entries(obj, where)
        if not entries:
            raise ArtifactRejectedError(f"{where}: the index lists no edge-toolkit bundle")
        first = L.BundleInfo.from_annotations(entries[0].annotations, where)
        return Resolved(ref, tuple(entries), first.name, first.version)
    if kind == L.MANIFEST_MEDIA_TYPE:
        _, info = L.bundle_layer(obj, where)
        desc = L.Descriptor(L.MANIFEST_MEDIA_TYPE, L.digest_of(data), len(data),
                            info.annotations())
        return Resolved(ref, (desc,), info.name, info.version)
    raise ArtifactRejectedError(f"{where}: {kind!r} is neither an OCI index nor an OCI image "
                                "manifest")


@dataclass(frozen=True)
class PulledBundle:
    """One profile's bundle pulled: what its annotations say, and how many bytes of an
    earlier cut download were reused."""

    info: L.BundleInfo
    resumed_bytes: int


def pull_bundle(client: RegistryClient, entry: L.Descriptor, dest: Path, *,
                max_bytes: int = MAX_TOTAL_BYTES, on_progress: Progress | None = None,
                before_download: Callable[[L.Descriptor], None] | None = None,
                keep_partial: bool = True) -> PulledBundle:
    """Download the bundle of one profile's manifest ``entry`` into ``dest``; every digest
    checked, and the bundle's own manifest must be the one the annotations name
    (ArtifactRejectedError otherwise, nothing left).

    ``before_download(layer)`` runs once the layer's declared size is known and before any
    byte of it is fetched (an agent checks its free space there). A cut download resumes
    from what ``dest`` holds; a failure that could be resumed (the registry went away) leaves
    ``dest`` for the next pull only with ``keep_partial`` (edge-pack); without it every
    failure removes ``dest`` (an agent: no partial file outlives its pull)."""
    where = f"{client.ref.registry}/{client.ref.repository}@{entry.digest}"
    data, _, _ = client.get_manifest(entry.digest)
    layer, info = L.bundle_layer(L.parse_json(data, where), where)
    if before_download is not None:
        before_download(layer)
    try:
        resumed = client.download_blob(layer.digest, layer.size, dest, max_bytes=max_bytes,
                                       on_progress=on_progress)
        with open_bundle(dest) as reader:
            got = hashlib.sha256(reader.manifest_bytes).hexdigest()
    except PackagerError as exc:
        if not (keep_partial and isinstance(exc, RegistryUnavailableError)):
            with contextlib.suppress(OSError):
                dest.unlink()
        if isinstance(exc, (RegistryError, UsageError)):  # UsageError: a refused redirect
            raise
        raise ArtifactRejectedError(f"{where}: the layer is not a readable bundle: {exc}"
                                    ) from None
    except BaseException:
        if not keep_partial:
            with contextlib.suppress(OSError):
                dest.unlink()
        raise
    if got != info.manifest_sha256:
        with contextlib.suppress(OSError):
            dest.unlink()
        raise ArtifactRejectedError(f"{where}: the bundle's manifest.json is not the one "
                                    "the OCI manifest names; refused")
    return PulledBundle(info, resumed)


def pull_bundles(ref: OciReference, out_dir: Path, options: RegistryOptions, *,
                 profile: str | None = None,
                 on_progress: Callable[[str, int, int], None] | None = None) -> list[Path]:
    """Pull every profile's bundle (or ``profile``'s) into ``out_dir`` as
    ``NAME-VERSION-PROFILE.edgepkg``; a file already there is refused, nothing written."""
    resolved = resolve(ref, options)
    entries = list(resolved.entries)
    if profile is not None:
        entries = [e for e in entries if e.annotations.get(L.PROFILE) == profile]
        if not entries:
            held = ", ".join(str(e.annotations.get(L.PROFILE)) for e in resolved.entries)
            raise ArtifactNotFoundError(f"{ref} has no bundle for profile {profile}; it holds: "
                                        f"{held}")
    targets = []
    for e in entries:
        info = L.BundleInfo.from_annotations(e.annotations, str(ref))
        target = out_dir / f"{info.name}-{info.version}-{info.profile}.edgepkg"
        if target.exists():
            raise UsageError(f"{target} already exists; remove it or pull into another --out")
        targets.append((e, target))
    out_dir.mkdir(parents=True, exist_ok=True)
    client = RegistryClient(resolved.reference, options)
    done = []
    for e, target in targets:
        part = target.with_name(f".{target.name}.part")
        profile_name = str(e.annotations.get(L.PROFILE))
        pull_bundle(client, e, part, on_progress=_bind(on_progress, profile_name))
        os.replace(part, target)
        done.append(target)
    return done
