"""How a bundle is laid out as an OCI artifact (docs/bundle-format.md "In an OCI registry"):
media types, annotations, the manifest per profile and the index over the profiles of one
version. Pure values and JSON: no network.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packager.bundle.errors import ArtifactRejectedError

ARTIFACT_TYPE = "application/vnd.edge-toolkit.bundle.v1"
BUNDLE_MEDIA_TYPE = "application/vnd.edge-toolkit.bundle.v1.tar"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
DOCKER_LIST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json",)
INDEX_TYPES = (INDEX_MEDIA_TYPE, DOCKER_LIST_MEDIA_TYPE)
"""Media types of an index (a list of manifests), OCI's and docker's."""
EMPTY_CONFIG = b"{}"
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
PREFIX = "org.edge-toolkit.bundle."
NAME, VERSION, PROFILE, ARCH, BACKEND = (PREFIX + k for k in
                                         ("name", "version", "profile", "arch", "backend"))
MANIFEST_SHA = PREFIX + "manifest.sha256"
SIGNATURE_SHA = PREFIX + "signature.sha256"
UNSIGNED = "unsigned"
MAX_MANIFEST_BYTES = 4 << 20
"""Largest manifest or index accepted (the distribution server's own limit)."""
MAX_INDEX_ENTRIES = 256
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
_OCI_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def digest_of(data: bytes) -> str:
    """``sha256:HEX`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(obj: Mapping[str, Any]) -> bytes:
    """The JSON bytes we push (sorted keys, no spaces): the digest covers exactly these."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest,
                               "size": self.size}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


@dataclass(frozen=True)
class BundleInfo:
    """What the annotations of one profile's manifest say about its bundle."""

    name: str
    version: int
    profile: str
    arch: str
    backend: str
    manifest_sha256: str
    signature_sha256: str  # "unsigned" or the hex sha256 of manifest.sig

    def annotations(self) -> dict[str, str]:
        return {NAME: self.name, VERSION: str(self.version), PROFILE: self.profile,
                ARCH: self.arch, BACKEND: self.backend, MANIFEST_SHA: self.manifest_sha256,
                SIGNATURE_SHA: self.signature_sha256}

    @classmethod
    def from_annotations(cls, ann: Mapping[str, Any], where: str) -> BundleInfo:
        """Read back (ArtifactRejectedError naming ``where`` when one is missing)."""
        values = {}
        for key in (NAME, VERSION, PROFILE, ARCH, BACKEND, MANIFEST_SHA, SIGNATURE_SHA):
            v = ann.get(key)
            if not isinstance(v, str) or not v or len(v) > 256:
                raise ArtifactRejectedError(f"{where}: annotation {key} is missing or invalid; "
                                            "push the bundle with `edge-pack push`")
            values[key] = v
        if not values[VERSION].isdigit():
            raise ArtifactRejectedError(f"{where}: annotation {VERSION} is not a number")
        return cls(values[NAME], int(values[VERSION]), values[PROFILE], values[ARCH],
                   values[BACKEND], values[MANIFEST_SHA], values[SIGNATURE_SHA])


def bundle_manifest(layer: Descriptor, info: BundleInfo, created: str) -> bytes:
    """The image manifest of one profile's bundle (config: the OCI empty descriptor)."""
    return canonical({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": digest_of(EMPTY_CONFIG),
                   "size": len(EMPTY_CONFIG), "data": "e30="},
        "layers": [layer.to_json()],
        "annotations": {**info.annotations(), CREATED: created},
    })


def index_entry(manifest: bytes, info: BundleInfo) -> dict[str, Any]:
    """One profile's line in the version's index."""
    return {"mediaType": MANIFEST_MEDIA_TYPE, "digest": digest_of(manifest),
            "size": len(manifest), "artifactType": ARTIFACT_TYPE,
            "platform": {"os": "linux", "architecture": _OCI_ARCH.get(info.arch, info.arch)},
            "annotations": info.annotations()}


def bundle_index(entries: Sequence[Mapping[str, Any]], name: str, version: int) -> bytes:
    """The index over the profiles of one model version (sorted by profile)."""
    ordered = sorted(entries, key=lambda e: str(e["annotations"][PROFILE]))
    return canonical({"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE,
                      "artifactType": ARTIFACT_TYPE, "manifests": ordered,
                      "annotations": {NAME: name, VERSION: str(version)}})


def parse_json(data: bytes, where: str) -> dict[str, Any]:
    """A JSON object, size-capped (ArtifactRejectedError)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ArtifactRejectedError(f"{where}: {len(data)} bytes, more than the "
                                    f"{MAX_MANIFEST_BYTES} a manifest may have")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ArtifactRejectedError(f"{where}: not JSON") from None
    except RecursionError:  # [[[[...]]]]: deeper than the parser's stack
        raise ArtifactRejectedError(f"{where}: JSON nested too deeply to be a manifest; "
                                    "refused") from None
    if not isinstance(obj, dict):
        raise ArtifactRejectedError(f"{where}: not a JSON object")
    return obj


def _descriptor(obj: Any, where: str) -> Descriptor:
    if not isinstance(obj, dict):
        raise ArtifactRejectedError(f"{where}: a descriptor is not an object")
    mt, dg, size = obj.get("mediaType"), obj.get("digest"), obj.get("size")
    ann = obj.get("annotations") or {}
    if not isinstance(mt, str) or not isinstance(dg, str) or not _DIGEST.match(dg):
        raise ArtifactRejectedError(f"{where}: a descriptor has no media type or no sha256 "
                                    "digest")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ArtifactRejectedError(f"{where}: a descriptor's size is not a count of bytes")
    if not isinstance(ann, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in ann.items()):
        raise ArtifactRejectedError(f"{where}: annotations must map strings to strings")
    return Descriptor(mt, dg, size, ann)


def index_entries(index: Mapping[str, Any], where: str) -> list[Descriptor]:
    """The bundle manifests an index lists (other artifacts in it are skipped)."""
    items = index.get("manifests")
    if not isinstance(items, list) or len(items) > MAX_INDEX_ENTRIES:
        raise ArtifactRejectedError(f"{where}: an index needs a 'manifests' list of at most "
                                    f"{MAX_INDEX_ENTRIES} entries")
    out = [_descriptor(d, where) for d in items]
    return [d for d in out if d.media_type == MANIFEST_MEDIA_TYPE and PROFILE in d.annotations]


def bundle_layer(manifest: Mapping[str, Any], where: str) -> tuple[Descriptor, BundleInfo]:
    """The one bundle layer of a profile's manifest and what its annotations say."""
    kind = manifest.get("mediaType")
    if kind in INDEX_TYPES or "manifests" in manifest:
        raise ArtifactRejectedError(f"{where}: an index where a bundle's image manifest is "
                                    "expected (indexes nested in an index are not followed); "
                                    "refused")
    if kind != MANIFEST_MEDIA_TYPE:
        raise ArtifactRejectedError(f"{where}: {kind!r} is not an OCI image manifest; refused")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or len(layers) != 1:
        raise ArtifactRejectedError(f"{where}: a bundle manifest has exactly one layer")
    layer = _descriptor(layers[0], where)
    if layer.media_type in (MANIFEST_MEDIA_TYPE, *INDEX_TYPES, *DOCKER_MANIFEST_TYPES):
        raise ArtifactRejectedError(f"{where}: the layer is a manifest ({layer.media_type}) "
                                    "nested in a manifest, not an edge-toolkit bundle; refused")
    if layer.media_type != BUNDLE_MEDIA_TYPE:
        raise ArtifactRejectedError(f"{where}: the layer is {layer.media_type!r}, not an "
                                    f"edge-toolkit bundle ({BUNDLE_MEDIA_TYPE})")
    ann = manifest.get("annotations") or {}
    if not isinstance(ann, dict):
        raise ArtifactRejectedError(f"{where}: annotations must be an object")
    return layer, BundleInfo.from_annotations(ann, where)


def choose_entry(entries: Sequence[Descriptor], profile: str, arch: str,
                 runtimes: Sequence[str], where: str) -> Descriptor:
    """The entry for a device: its exact profile, else one of its arch whose backend it runs
    (ArtifactNotFoundError naming what the index holds)."""
    from packager.bundle.errors import ArtifactNotFoundError

    exact = [e for e in entries if e.annotations.get(PROFILE) == profile]
    if exact:
        return exact[0]
    fitting = [e for e in entries if e.annotations.get(ARCH) == arch
               and e.annotations.get(BACKEND) in runtimes]
    if fitting:
        return fitting[0]
    held = ", ".join(sorted(str(e.annotations.get(PROFILE)) for e in entries)) or "none"
    raise ArtifactNotFoundError(f"{where} holds no bundle for profile {profile} ({arch}); it "
                                f"holds: {held}. Build and push one with `edge-pack build "
                                f"--profile {profile}` and `edge-pack push`")
