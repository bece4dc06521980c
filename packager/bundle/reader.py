"""Read, verify and safely extract .edgepkg bundles (used by the agent and the console).

Nothing here trusts the archive: member names, types and sizes are checked against the rules in
docs/bundle-format.md and against the manifest before a byte is written, and extraction goes
to a sibling temp dir that is renamed into place only when every file has its manifest hash.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, BinaryIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from packager.bundle.errors import (
    BundleError,
    NoTrustedKeyError,
    UnsignedBundleError,
    UnsignedCodeError,
    UntrustedSignatureError,
)
from packager.bundle.format import (
    MAX_MANIFEST_BYTES,
    MAX_MEMBER_BYTES,
    MAX_MEMBERS,
    MAX_TOTAL_BYTES,
    check_member_path,
    check_model_name,
)
from packager.bundle.manifest import MANIFEST_NAME, SIGNATURE_NAME, FileEntry, Manifest
from packager.bundle.signing import SIGNATURE_SIZE, key_id, load_public_key, verify_signature

_CHUNK = 1 << 20


def validate_manifest(manifest: Manifest, where: str) -> None:
    """Check the manifest's own structure: safe unique file paths, artifacts among the files."""
    check_model_name(manifest.name)
    if manifest.version < 1:
        raise BundleError(f"{where}: manifest version {manifest.version} is not a positive integer")
    seen: set[str] = set()
    for f in manifest.files:
        try:
            check_member_path(f.path)
        except BundleError as exc:
            raise BundleError(f"{where}: manifest lists an unsafe file: {exc}") from exc
        if f.path in (MANIFEST_NAME, SIGNATURE_NAME) or f.path in seen:
            raise BundleError(f"{where}: manifest lists {f.path!r} twice or as a reserved name")
        if f.size < 0 or len(f.sha256) != 64:
            raise BundleError(f"{where}: manifest entry {f.path!r} has a bad size or sha256")
        seen.add(f.path)
    for backend, entry in manifest.artifacts.items():
        if entry not in seen:
            raise BundleError(f"{where}: artifact {entry!r} of backend {backend!r} is not among "
                              "the manifest's files")
    for backend, data in manifest.external_data.items():
        graph = manifest.artifacts.get(backend)
        if graph is None:
            raise BundleError(f"{where}: external_data names backend {backend!r}, which has no "
                              "artifact")
        folder = graph.rpartition("/")[0]
        for path in data:
            if path not in seen or path.rpartition("/")[0] != folder:
                raise BundleError(f"{where}: external data file {path!r} of {graph!r} must be "
                                  "one of the manifest's files, beside the artifact")


CODE_BACKENDS = frozenset({"python"})
"""Backends whose bundles carry code that runs on the device (signature always required)."""


def carries_code(manifest: Manifest) -> bool:
    """Whether ``manifest``'s bundle carries code that the agent would run."""
    return manifest.backend in CODE_BACKENDS or manifest.fallback_backend in CODE_BACKENDS \
        or any(b in CODE_BACKENDS for b in manifest.artifacts)


def check_manifest_signature(
    manifest_bytes: bytes, manifest: Manifest, signature: bytes | None,
    trusted_keys: Sequence[Path | Ed25519PublicKey] = (), allow_unsigned: bool = False, *,
    label: str = "bundle",
) -> str | None:
    """The signature rule: the matching trusted key's id, or None for an allowed unsigned bundle.

    Raises BundleError when ``manifest_bytes`` is not the canonical form of ``manifest``, and a
    SignatureError subclass for an unsigned bundle (:class:`UnsignedBundleError`), a signed
    one checked without any trusted key (:class:`NoTrustedKeyError`, unless ``allow_unsigned``)
    or one no trusted key signed (:class:`UntrustedSignatureError`).
    """
    if manifest_bytes != manifest.canonical_bytes():
        raise BundleError(f"{label}: manifest.json is not in canonical form (modified "
                          "after it was written)")
    keys = [k if isinstance(k, Ed25519PublicKey) else load_public_key(k) for k in trusted_keys]
    if carries_code(manifest) and (signature is None or not keys):
        raise UnsignedCodeError(
            f"{label}: the bundle carries Python code ({manifest.backend} model), which runs "
            "only when signed by a trusted key, whatever --allow-unsigned says; "
            + ("sign it (`edge-pack build --key KEY`) and " if signature is None else "")
            + "start the agent with --trust KEY.pub")
    if signature is None:
        if allow_unsigned:
            return None
        raise UnsignedBundleError(f"{label}: the bundle is unsigned (build it with --key, or "
                                  "allow unsigned bundles explicitly)")
    if not keys:
        if allow_unsigned:
            return None
        raise NoTrustedKeyError(f"{label}: the bundle is signed but no trusted public key "
                                "was given to check manifest.sig")
    for key in keys:
        if verify_signature(key, signature, manifest_bytes):
            return key_id(key)
    raise UntrustedSignatureError(f"{label}: manifest.sig is not a valid signature of "
                                  "manifest.json by any trusted key (manifest or signature "
                                  "modified, or signed by another key)")


class BundleReader:
    """An open bundle. Use as a context manager; see :func:`open_bundle`."""

    def __init__(self, path: Path, *, max_member_bytes: int = MAX_MEMBER_BYTES,
                 max_total_bytes: int = MAX_TOTAL_BYTES, label: str | None = None) -> None:
        self.path = Path(path)
        self.label = label or str(self.path)
        """What messages call the bundle (the path, or e.g. the name a user uploaded it as)."""
        self.max_member_bytes = max_member_bytes
        self.max_total_bytes = max_total_bytes
        self._fh: BinaryIO | None = None
        self._tar: tarfile.TarFile | None = None
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    # -- opening -----------------------------------------------------------------------------
    def _open(self) -> None:
        if not self.path.is_file():
            raise BundleError(f"{self.label}: no such bundle file")
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - closed in close()
            self._tar = tarfile.open(fileobj=self._fh, mode="r:")  # noqa: SIM115
            members = self._tar.getmembers()
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise BundleError(f"{self.label}: not a bundle (unreadable or truncated tar: "
                              f"{exc})") from exc
        for m in members:  # before the end marker: a sparse member's size is its expanded one
            if m.issparse():
                raise BundleError(f"{self.label}: member {m.name!r} is a sparse file (it would "
                                  f"expand to {m.size} bytes); bundles hold plain regular files "
                                  "only")
        self._check_end_marker(members)
        if not members or len(members) > MAX_MEMBERS:
            raise BundleError(f"{self.label}: not a bundle (empty archive or more than "
                              f"{MAX_MEMBERS} members)")
        if members[0].name != MANIFEST_NAME:
            raise BundleError(f"{self.label}: not a bundle ({MANIFEST_NAME} must be the first "
                              f"member, found {members[0].name!r})")
        names: dict[str, tarfile.TarInfo] = {}
        total = 0
        for m in members:
            self._check_member(m)
            if m.name in names:
                raise BundleError(f"{self.label}: member {m.name!r} appears twice")
            names[m.name] = m
            total += m.size
            if total > self.max_total_bytes:
                raise BundleError(f"{self.label}: members exceed the total size cap of "
                                  f"{self.max_total_bytes} bytes")
        self._members = names
        raw = self._read_member(names[MANIFEST_NAME], MAX_MANIFEST_BYTES)
        self.manifest_bytes = raw
        self.manifest = Manifest.from_json(raw)
        validate_manifest(self.manifest, self.label)
        self.signature: bytes | None = None
        if SIGNATURE_NAME in names:
            self.signature = self._read_member(names[SIGNATURE_NAME], SIGNATURE_SIZE)
        listed = {f.path for f in self.manifest.files} | {MANIFEST_NAME, SIGNATURE_NAME}
        extra = sorted(set(names) - listed)
        if extra:
            raise BundleError(f"{self.label}: member {extra[0]!r} is not listed in the manifest")

    def _check_end_marker(self, members: list[tarfile.TarInfo]) -> None:
        """A complete tar ends with two zero blocks after the last member's padded data."""
        if not members:
            return
        last = members[-1]
        end = last.offset_data + -(-last.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        assert self._fh is not None
        self._fh.seek(end)
        marker = self._fh.read(2 * tarfile.BLOCKSIZE)
        if len(marker) != 2 * tarfile.BLOCKSIZE or marker.strip(b"\0"):
            raise BundleError(f"{self.label}: not a bundle (truncated: the tar end-of-archive "
                              "marker is missing)")

    def _check_member(self, m: tarfile.TarInfo) -> None:
        try:
            check_member_path(m.name)
        except BundleError as exc:
            raise BundleError(f"{self.label}: unsafe member: {exc}") from exc
        if not m.isreg():
            kind = ("symlink" if m.issym() else "hard link" if m.islnk() else
                    "directory" if m.isdir() else "device or special file")
            raise BundleError(f"{self.label}: member {m.name!r} is a {kind}; bundles hold "
                              "regular files only")
        if m.size > self.max_member_bytes:
            raise BundleError(f"{self.label}: member {m.name!r} is {m.size} bytes, past the cap "
                              f"of {self.max_member_bytes}")

    def _read_member(self, m: tarfile.TarInfo, cap: int) -> bytes:
        if m.size > cap:
            raise BundleError(f"{self.label}: member {m.name!r} is {m.size} bytes, more than "
                              f"the {cap} allowed")
        try:
            f = self._tarfile.extractfile(m)
            data = f.read() if f is not None else b""
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"{self.label}: cannot read member {m.name!r}: {exc}") from exc
        if len(data) != m.size:
            raise BundleError(f"{self.label}: member {m.name!r} is truncated")
        return data

    @property
    def _tarfile(self) -> tarfile.TarFile:
        if self._tar is None:
            raise BundleError(f"{self.label}: the bundle is closed")
        return self._tar

    # -- public API ------------------------------------------------------------------------
    @property
    def signed(self) -> bool:
        """True when the bundle carries manifest.sig (whether it verifies is another matter)."""
        return self.signature is not None

    def _stream(self, entry: FileEntry) -> Iterator[bytes]:
        m = self._members.get(entry.path)
        if m is None:
            raise BundleError(f"{self.label}: file {entry.path!r} is listed in the manifest but "
                              "missing from the bundle")
        if m.size != entry.size:
            raise BundleError(f"{self.label}: file {entry.path!r} is {m.size} bytes, the "
                              f"manifest says {entry.size}")
        try:
            f: IO[bytes] | None = self._tarfile.extractfile(m)
            if f is None:
                raise BundleError(f"{self.label}: member {entry.path!r} is not a regular file")
            left = m.size
            while left > 0:
                block = f.read(min(_CHUNK, left))
                if not block:
                    raise BundleError(f"{self.label}: file {entry.path!r} is truncated")
                left -= len(block)
                yield block
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"{self.label}: cannot read {entry.path!r}: {exc}") from exc

    def verify_files(self) -> None:
        """Re-hash every file against the manifest; BundleError naming the first that differs."""
        for entry in self.manifest.files:
            h = hashlib.sha256()
            for block in self._stream(entry):
                h.update(block)
            if h.hexdigest() != entry.sha256:
                raise BundleError(f"{self.label}: file {entry.path!r} does not match its manifest "
                                  f"sha256 (bundle modified or corrupt)")

    def verify_signature(
        self, trusted_keys: Sequence[Path | Ed25519PublicKey] = (), allow_unsigned: bool = False,
    ) -> str | None:
        """Check manifest.sig against the trusted keys; return the matching key id.

        The rule is :func:`check_manifest_signature` (also applied before an upload).
        """
        return check_manifest_signature(self.manifest_bytes, self.manifest, self.signature,
                                        trusted_keys, allow_unsigned, label=self.label)

    def verify(self, trusted_keys: Sequence[Path | Ed25519PublicKey] = (),
               allow_unsigned: bool = False) -> None:
        """Check the signature (see :meth:`verify_signature`) and every file hash."""
        self.verify_signature(trusted_keys, allow_unsigned)
        self.verify_files()

    def extract(self, target_dir: Path) -> Path:
        """Extract into ``target_dir`` (which must not exist) atomically; return it.

        Files land at their manifest paths with their hashes checked on the way; manifest.json
        (and manifest.sig when signed) are written too. Nothing is written outside a sibling
        temp dir until the final rename.
        """
        target = Path(target_dir)
        if target.exists() or target.is_symlink():
            raise BundleError(f"extract target {target} already exists")
        parent = target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BundleError(f"cannot create {parent} to extract into: {exc.strerror}") from exc
        tmp = parent / f".{target.name}.extract-{secrets.token_hex(6)}"
        tmp.mkdir(mode=0o755)
        try:
            for entry in self.manifest.files:
                self._extract_one(entry, tmp)
            self._write_new(tmp / MANIFEST_NAME, self.manifest_bytes)
            if self.signature is not None:
                self._write_new(tmp / SIGNATURE_NAME, self.signature)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target

    def _extract_one(self, entry: FileEntry, root: Path) -> None:
        check_member_path(entry.path)
        dest = root.joinpath(*entry.path.split("/"))
        # Paths are checked segment by segment, and directories are created by us only, so
        # resolve() must stay under root; check anyway.
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.parent.resolve().is_relative_to(root.resolve()):
            raise BundleError(f"{self.label}: member {entry.path!r} would land outside the target")
        h = hashlib.sha256()
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o644)
        with os.fdopen(fd, "wb") as out:
            for block in self._stream(entry):
                h.update(block)
                out.write(block)
        if h.hexdigest() != entry.sha256:
            raise BundleError(f"{self.label}: file {entry.path!r} does not match its manifest "
                              "sha256 (bundle modified or corrupt)")

    @staticmethod
    def _write_new(path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(data)

    def close(self) -> None:
        """Close the underlying file."""
        if self._tar is not None:
            self._tar.close()
            self._tar = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> BundleReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_bundle(path: Path, *, max_member_bytes: int = MAX_MEMBER_BYTES,
                max_total_bytes: int = MAX_TOTAL_BYTES, label: str | None = None,
                ) -> BundleReader:
    """Open a bundle and check its structure; BundleError on a non-bundle/corrupt/unsafe file.

    ``label`` is what error messages call the bundle (default: its path)."""
    return BundleReader(Path(path), max_member_bytes=max_member_bytes,
                        max_total_bytes=max_total_bytes, label=label)


def load_extracted(model_dir: Path, verify_hashes: bool = True) -> Manifest:
    """The manifest of an extracted bundle dir; re-hash every file unless told not to."""
    model_dir = Path(model_dir)
    mpath = model_dir / MANIFEST_NAME
    try:
        raw = mpath.read_bytes()
    except OSError as exc:
        raise BundleError(f"{mpath}: cannot read the manifest ({exc.strerror})") from exc
    manifest = Manifest.from_json(raw)
    validate_manifest(manifest, str(model_dir))
    for entry in manifest.files:
        fpath = model_dir.joinpath(*entry.path.split("/"))
        if fpath.is_symlink() or not fpath.is_file():
            raise BundleError(f"{model_dir}: file {entry.path!r} is missing or not a regular file")
        size = fpath.stat().st_size
        if size != entry.size:
            raise BundleError(f"{model_dir}: file {entry.path!r} is {size} bytes, the manifest "
                              f"says {entry.size}")
        if verify_hashes:
            h = hashlib.sha256()
            with open(fpath, "rb") as f:
                while block := f.read(_CHUNK):
                    h.update(block)
            if h.hexdigest() != entry.sha256:
                raise BundleError(f"{model_dir}: file {entry.path!r} does not match its manifest "
                                  "sha256")
    return manifest


def verify_extracted(model_dir: Path, trusted_keys: Sequence[Path | Ed25519PublicKey] = (),
                     allow_unsigned: bool = False) -> Manifest:
    """Like :func:`load_extracted` (hashes re-checked), plus the manifest.sig of the dir checked
    against the trusted keys (:func:`check_manifest_signature`)."""
    model_dir = Path(model_dir)
    manifest = load_extracted(model_dir, verify_hashes=True)
    raw = (model_dir / MANIFEST_NAME).read_bytes()
    sig_path = model_dir / SIGNATURE_NAME
    signature = sig_path.read_bytes() if sig_path.is_file() else None
    check_manifest_signature(raw, manifest, signature, trusted_keys, allow_unsigned,
                             label=str(model_dir))
    return manifest
