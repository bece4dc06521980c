"""What every build shares around its conversions: the profiles asked for, a hidden staging
directory in ``out_dir``, and the rename into place once every profile succeeded (so a failed
build leaves nothing in ``out_dir``). Used by :mod:`packager.build` and
:mod:`packager.spec_build`.

A bundle already in ``out_dir`` under the same name (same model name, version and profile) is
replaced only when it was built from the same source (the same model file's sha256 and, for a
Python model, the same code files): a rebuild. One built from another source is refused unless
``overwrite``: two different models must not carry one name and version."""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from packager.bundle.errors import PackagerError, UsageError
from packager.bundle.format import CODE_DIR
from packager.bundle.manifest import Manifest
from packager.bundle.profiles import DeviceProfile, load_profile


def load_profiles(names: Sequence[str]) -> list[DeviceProfile]:
    """The named profiles (at least one, none twice)."""
    if not names:
        raise UsageError("give at least one --profile (see `edge-pack profiles`)")
    if len(set(names)) != len(names):
        raise UsageError(f"a profile is given twice: {list(names)}")
    return [load_profile(p) for p in names]


def open_stage(out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(out, stage)``: the output directory (created) and a new hidden directory in it."""
    out = Path(out_dir)
    stage = out / f".edge-pack-{secrets.token_hex(6)}.tmp"
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage.mkdir()
    except OSError as exc:
        raise UsageError(f"cannot write to the output directory {out}: "
                         f"{exc.strerror or exc}") from exc
    return out, stage


Source = tuple[str, str, tuple[tuple[str, str], ...]]
"""What a bundle was built from: (source file name, its sha256, code files' (path, sha256))."""


def source_of(manifest: Manifest) -> Source:
    """The :data:`Source` a built bundle records in its manifest."""
    code = tuple((f.path, f.sha256) for f in manifest.files if f.path.startswith(f"{CODE_DIR}/"))
    return manifest.source_name, manifest.source_sha256, code


def check_replace(dest: Path, source: Source, *, overwrite: bool) -> None:
    """UsageError when writing a bundle built from ``source`` to ``dest`` would silently
    replace one built from another source (or a file that is no readable bundle)."""
    if overwrite or not (dest.exists() or dest.is_symlink()):
        return
    from packager.bundle.reader import open_bundle

    try:
        with open_bundle(dest) as reader:
            there = source_of(reader.manifest)
    except (PackagerError, OSError) as exc:
        raise UsageError(f"{dest} already exists and is not a readable bundle ({exc}); pass "
                         "--overwrite to replace it") from None
    if there[1] and there[1:] == source[1:]:
        return  # a rebuild from the same source
    raise UsageError(
        f"{dest} already exists and was built from another source ({there[0] or '?'} sha256 "
        f"{there[1][:12] or '?'}; this build: {source[0]} sha256 {source[1][:12]}): build "
        "a new --version, or pass --overwrite to replace it")


def publish(built: Sequence[Path], out: Path, *, overwrite: bool = False) -> list[Path]:
    """Rename every staged bundle into ``out``; their final paths. Nothing is renamed when
    one would replace a bundle built from another source (:func:`check_replace`)."""
    from packager.bundle.reader import open_bundle

    for tmp in built:
        with open_bundle(tmp) as reader:
            check_replace(out / tmp.name, source_of(reader.manifest), overwrite=overwrite)
    final = []
    for tmp in built:
        dest = out / tmp.name
        os.replace(tmp, dest)
        final.append(dest)
    return final
