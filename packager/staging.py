"""What every build shares around its conversions: the profiles asked for, a hidden staging
directory in ``out_dir``, and the rename into place once every profile succeeded (so a failed
build leaves nothing in ``out_dir``). Used by :mod:`packager.build` and
:mod:`packager.spec_build`."""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from packager.bundle.errors import UsageError
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


def publish(built: Sequence[Path], out: Path) -> list[Path]:
    """Rename every staged bundle into ``out``; their final paths."""
    final = []
    for tmp in built:
        dest = out / tmp.name
        os.replace(tmp, dest)
        final.append(dest)
    return final
