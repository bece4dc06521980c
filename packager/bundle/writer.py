"""Write a bundle: hash the staged files into the manifest, sign it, and lay out the tar."""

from __future__ import annotations

import dataclasses
import io
import tarfile
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from packager.bundle.format import check_member_path, sha256_file
from packager.bundle.manifest import MANIFEST_NAME, SIGNATURE_NAME, FileEntry, Manifest
from packager.bundle.signing import sign


def file_entries(root: Path) -> tuple[FileEntry, ...]:
    """Every regular file under ``root`` as a FileEntry, sorted by POSIX path."""
    entries = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            rel = p.relative_to(root).as_posix()
            check_member_path(rel)
            entries.append(FileEntry(rel, p.stat().st_size, sha256_file(p)))
    return tuple(sorted(entries, key=lambda e: e.path))


def _tarinfo(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def write_bundle(out_path: Path, root: Path, manifest: Manifest,
                 key: Ed25519PrivateKey | None, mtime: int) -> Manifest:
    """Write ``out_path`` from the files under ``root``; returns the manifest with its file list.

    Layout: manifest.json first, manifest.sig second (when signed), then files sorted by path.
    """
    manifest = dataclasses.replace(manifest, files=file_entries(root))
    data = manifest.canonical_bytes()
    with tarfile.open(out_path, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_tarinfo(MANIFEST_NAME, len(data), mtime), io.BytesIO(data))
        if key is not None:
            sig = sign(key, data)
            tar.addfile(_tarinfo(SIGNATURE_NAME, len(sig), mtime), io.BytesIO(sig))
        for entry in manifest.files:
            with open(root.joinpath(*entry.path.split("/")), "rb") as f:
                tar.addfile(_tarinfo(entry.path, entry.size, mtime), f)
    return manifest
