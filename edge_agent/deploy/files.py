"""Model versions on disk: ``STATE_DIR/models/NAME/VERSION/`` and ``STATE_DIR/incoming/``.

Staging extracts a verified bundle atomically (the reader extracts into a hidden directory and
renames it into place); removal renames a version out of the layout in one step, then deletes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
from pathlib import Path

from edge_agent.deploy.compat import (
    already_active,
    check_disk_space,
    extracted_bytes,
    manifest_sha,
    version_conflict,
)
from edge_agent.deploy.errors import disk_full, is_disk_full, storage_error
from packager.bundle.errors import PackagerError
from packager.bundle.manifest import MANIFEST_NAME, Manifest
from packager.bundle.reader import BundleReader, load_extracted

__all__ = ["VersionFiles", "bundle_manifest_sha", "dir_size", "manifest_sha"]


def bundle_manifest_sha(reader: BundleReader) -> str:
    """sha256 of a bundle's manifest.json (what :func:`manifest_sha` finds once extracted)."""
    return hashlib.sha256(reader.manifest_bytes).hexdigest()


def dir_size(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class VersionFiles:
    """Where versions and uploads live, and the only code that creates or deletes them."""

    def __init__(self, state_dir: Path, models_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.models_dir = Path(models_dir)
        self.incoming_dir = self.state_dir / "incoming"

    def path(self, model: str, version: int) -> Path:
        """The directory of one version."""
        return self.models_dir / model / str(version)

    def manifest(self, model: str, version: int) -> Manifest | None:
        """The manifest of a version on disk (None when it cannot be read)."""
        try:
            return Manifest.from_json((self.path(model, version) / MANIFEST_NAME).read_bytes())
        except (OSError, PackagerError):
            return None

    def new_upload_path(self) -> Path:
        """A fresh file under ``STATE_DIR/incoming/`` to receive an upload into; refused at
        once (before any byte is received) when the directory cannot be written."""
        try:
            self.incoming_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not os.access(self.incoming_dir, os.W_OK):
                raise PermissionError(errno.EACCES, "not writable", str(self.incoming_dir))
        except OSError as exc:
            error = storage_error(exc, "receive an upload", self.incoming_dir)
            if error is None:
                raise
            raise error from exc
        return self.incoming_dir / f"upload-{secrets.token_hex(8)}.edgepkg"

    def clean_partial(self) -> list[str]:
        """Remove unfinished uploads and half-extracted or half-removed versions (start-up)."""
        notes = []
        if self.incoming_dir.exists():
            for p in self.incoming_dir.iterdir():
                with contextlib.suppress(OSError):
                    p.unlink() if p.is_file() else shutil.rmtree(p)
                notes.append(f"removed an unfinished upload {p.name}")
        if self.models_dir.is_dir():
            for model_dir in self.models_dir.iterdir():
                if not model_dir.is_dir():
                    continue
                for p in model_dir.iterdir():
                    if p.name.startswith("."):
                        shutil.rmtree(p, ignore_errors=True)
                        notes.append(f"removed a half-extracted {model_dir.name}/{p.name}")
        return notes

    def damage(self, model: str, version: int) -> str | None:
        """What is wrong with a version's files against its manifest (every size and sha256
        re-checked), or None when they are whole."""
        try:
            load_extracted(self.path(model, version))
        except (PackagerError, OSError) as exc:
            return str(exc)
        return None

    def stage(self, reader: BundleReader, *, active: int | None,
              force: bool) -> tuple[str, bool]:
        """Put the (verified) bundle in its version directory; returns a one-line note and
        whether a damaged copy already there was replaced.

        An existing directory with the same manifest and whole files is kept; one with missing
        or altered files (left half on disk by anything) is extracted again from the bundle;
        one with another manifest refuses the version number (build a higher version).
        """
        m = reader.manifest
        target = self.path(m.name, m.version)
        if not target.exists():
            self._extract(reader, target)
            return f"extracted to {target}", False
        on_disk = manifest_sha(target)
        if on_disk and on_disk != bundle_manifest_sha(reader):
            raise version_conflict(m.name, m.version)
        damage = self.damage(m.name, m.version)
        if damage is None:
            if m.version == active and not force:
                raise already_active(m.name, m.version)
            return f"version {m.version} already on disk with the same content", False
        fresh = target.with_name(f".{m.version}.repair-{secrets.token_hex(4)}")
        self._extract(reader, fresh)
        self.delete(m.name, m.version)
        fresh.rename(target)
        return (f"version {m.version} was on disk with missing or altered files ({damage}); "
                "extracted again from the bundle"), True

    @staticmethod
    def _extract(reader: BundleReader, target: Path) -> None:
        m = reader.manifest
        check_disk_space(target.parent, extracted_bytes(m), f"extract {m.name} version {m.version}")
        try:
            reader.extract(target)
        except (PackagerError, OSError) as exc:
            if is_disk_full(exc):
                raise disk_full(f"extract {m.name} version {m.version}", target.parent) from exc
            raise

    def delete(self, model: str, version: int) -> None:
        """Remove one version's directory (renamed out of the layout first: one atomic step)."""
        target = self.path(model, version)
        if target.exists():
            doomed = target.with_name(f".{version}.removing-{secrets.token_hex(4)}")
            target.rename(doomed)
            shutil.rmtree(doomed, ignore_errors=True)
