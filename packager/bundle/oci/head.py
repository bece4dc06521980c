"""The head of a pushed bundle: its ``manifest.json`` and ``manifest.sig`` (the first two
members of the bundle's tar), read from the registry with one small Range request and checked
against the sha256 the OCI manifest's annotations name. Enough for an agent's CheckDeploy
before it pulls the whole bundle.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass

from packager.bundle.errors import ArtifactRejectedError
from packager.bundle.manifest import MANIFEST_NAME, SIGNATURE_NAME
from packager.bundle.oci import layout as L
from packager.bundle.oci.client import RegistryClient

BLOCK = 512
FIRST_READ = 64 << 10  # one request covers a manifest and signature of usual size


@dataclass(frozen=True)
class BundleHead:
    """What CheckDeploy is fed for one profile's bundle in a registry."""

    manifest: bytes
    signature: bytes | None
    size: int  # the bundle's size in bytes (the layer's)
    filename: str
    info: L.BundleInfo


def _members(data: bytes, want: int) -> tuple[dict[str, bytes], int]:
    """The tar members fully inside ``data`` among the first ``want``, and the bytes needed
    to hold the next one whole (0: none needed)."""
    found: dict[str, bytes] = {}
    offset = 0
    while len(found) < want:
        if offset + BLOCK > len(data):
            return found, offset + BLOCK
        header = data[offset:offset + BLOCK]
        if header == bytes(BLOCK):
            break
        try:
            info = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
        except tarfile.TarError as exc:
            raise ArtifactRejectedError(f"the bundle's tar header is invalid ({exc})") from None
        end = offset + BLOCK + info.size
        if end > len(data):
            return found, end
        if info.type not in (tarfile.XHDTYPE, tarfile.XGLTYPE):  # pax headers: skipped
            found[info.name] = data[offset + BLOCK:end]
        offset = end + (-info.size % BLOCK)
    return found, 0


def read_bundle_head(client: RegistryClient, entry: L.Descriptor) -> BundleHead:
    """The manifest and signature of the bundle of one profile's manifest ``entry``;
    ArtifactRejectedError when they are not what the annotations name."""
    data, _, _ = client.get_manifest(entry.digest)
    where = f"{entry.digest}"
    layer, info = L.bundle_layer(L.parse_json(data, where), where)
    signed = info.signature_sha256 != L.UNSIGNED
    limit = min(layer.size, FIRST_READ)
    head = client.read_blob_head(layer.digest, limit)
    members, needed = _members(head, 2 if signed else 1)
    for _ in range(3):  # a manifest larger than the first read: read as far as it ends
        if not needed or needed > min(layer.size, L.MAX_MANIFEST_BYTES + 4 * BLOCK):
            break
        head = client.read_blob_head(layer.digest, min(layer.size, needed + 2 * BLOCK))
        members, needed = _members(head, 2 if signed else 1)
    manifest = members.get(MANIFEST_NAME)
    if manifest is None or hashlib.sha256(manifest).hexdigest() != info.manifest_sha256:
        raise ArtifactRejectedError(f"{where}: the bundle does not start with the manifest its "
                                    "annotations name; push it again with `edge-pack push`")
    signature = members.get(SIGNATURE_NAME) if signed else None
    if signed and (signature is None or
                   hashlib.sha256(signature).hexdigest() != info.signature_sha256):
        raise ArtifactRejectedError(f"{where}: the bundle's signature is not the one its "
                                    "annotations name; push it again with `edge-pack push`")
    title = layer.annotations.get(L.TITLE) or f"{info.name}-{info.version}.edgepkg"
    return BundleHead(manifest, signature, layer.size, title, info)
