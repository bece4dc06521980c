"""Device profiles: one TOML file per device class, validated into a frozen dataclass.

Profiles are looked up in the installed wheel first (``packager/device_profiles``) and then in the
source checkout (``<repo>/device_profiles``).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packager.bundle.errors import ProfileError
from packager.bundle.manifest import BatchingConfig

BACKENDS = ("openvino", "onnxruntime", "tensorrt")
ARCHES = ("x86_64", "aarch64")
PRECISIONS = {
    "openvino": ("fp32", "fp16", "int8"),
    "onnxruntime": ("fp32", "int8"),
    "tensorrt": ("fp32", "fp16"),
}


@dataclass(frozen=True)
class ParityTolerance:
    """A converted output passes when every element has |got-ref| <= atol + rtol*|ref|
    and the top-1 agreement (for class-score outputs) is at least ``min_top1_agreement``.

    ``top1_only`` (set by the build for calibrated int8 artifacts, not in profiles): a
    class-score output passes on its top-1 agreement alone; its errors are recorded, not gated
    (static int8 moves scores by a few quantization steps)."""

    atol: float
    rtol: float
    min_top1_agreement: float = 1.0
    top1_only: bool = False


@dataclass(frozen=True)
class DeviceProfile:
    """What a class of devices runs: arch, backend, precision, batching defaults, tolerance."""

    name: str
    arch: str
    backend: str
    precision: str
    batching: BatchingConfig
    parity: ParityTolerance
    fallback_backend: str | None = None
    description: str = ""
    # backend name -> backend-specific options (e.g. {"tensorrt": {"workspace_mb": 1024}})
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: Path | None = None


PROFILE_PATH_ENV = "EDGE_PACK_PROFILE_PATH"


def profile_dirs() -> list[Path]:
    """Directories searched for ``*.toml`` profiles, in order: ``$EDGE_PACK_PROFILE_PATH``
    (os.pathsep-separated, for your own profiles), the installed wheel, the source checkout."""
    pkg = Path(__file__).resolve().parents[1]  # packager/
    extra = [Path(p) for p in os.environ.get(PROFILE_PATH_ENV, "").split(os.pathsep) if p]
    dirs = [*extra, pkg / "device_profiles", pkg.parent / "device_profiles"]
    return [d for d in dirs if d.is_dir()]


def _profile_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in profile_dirs():
        for p in sorted(d.glob("*.toml")):
            found.setdefault(p.stem, p)
    return found


def list_profiles() -> list[DeviceProfile]:
    """Every profile found, sorted by name (a malformed file raises ProfileError)."""
    return [parse_profile_file(p) for _, p in sorted(_profile_files().items())]


def load_profile(name: str) -> DeviceProfile:
    """The profile called ``name``; ProfileError naming the known ones when there is none."""
    files = _profile_files()
    if name not in files:
        known = ", ".join(sorted(files)) or "none found"
        raise ProfileError(f"unknown device profile {name!r} (known profiles: {known})")
    return parse_profile_file(files[name])


def parse_profile_file(path: Path) -> DeviceProfile:
    """Parse and validate one profile file; ProfileError names the file, the key and what
    was expected."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc.strerror}") from exc
    return _Validator(path).profile(data)


_TOP_KEYS = {"name", "description", "arch", "backend", "precision", "fallback_backend",
             "batching", "parity", "options"}


class _Validator:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, expected: str, got: Any) -> ProfileError:
        return ProfileError(f"{self.path}: key {key!r} must be {expected} (got {got!r})")

    def get(self, table: dict[str, Any], key: str, prefix: str = "", *, required: bool = True,
            default: Any = None) -> Any:
        if key not in table:
            if required:
                raise ProfileError(f"{self.path}: missing required key {prefix + key!r}")
            return default
        return table[key]

    def choice(self, table: dict[str, Any], key: str, options: tuple[str, ...],
               prefix: str = "") -> str:
        value = self.get(table, key, prefix)
        if value not in options:
            raise self.fail(prefix + key, "one of " + ", ".join(options), value)
        return str(value)

    def integer(self, table: dict[str, Any], key: str, prefix: str, default: int,
                minimum: int = 0) -> int:
        value = self.get(table, key, prefix, required=False, default=default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(prefix + key, f"an integer >= {minimum}", value)
        return value

    def number(self, table: dict[str, Any], key: str, prefix: str, default: float | None,
               maximum: float | None = None) -> float:
        value = self.get(table, key, prefix, required=default is None, default=default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (
                maximum is not None and value > maximum):
            bound = f" and <= {maximum}" if maximum is not None else ""
            raise self.fail(prefix + key, f"a number >= 0{bound}", value)
        return float(value)

    def table(self, data: dict[str, Any], key: str, *, required: bool) -> dict[str, Any]:
        value = self.get(data, key, required=required, default={})
        if not isinstance(value, dict):
            raise self.fail(key, "a table ([" + key + "])", value)
        return value

    def profile(self, data: dict[str, Any]) -> DeviceProfile:
        unknown = sorted(set(data) - _TOP_KEYS)
        if unknown:
            raise ProfileError(f"{self.path}: unknown key {unknown[0]!r} (expected keys: "
                               + ", ".join(sorted(_TOP_KEYS)) + ")")
        name = self.get(data, "name")
        if name != self.path.stem:
            raise self.fail("name", f"the file name without .toml ({self.path.stem!r})", name)
        backend = self.choice(data, "backend", BACKENDS)
        arch = self.choice(data, "arch", ARCHES)
        precision = self.choice(data, "precision", PRECISIONS[backend])
        fallback = self.get(data, "fallback_backend", required=False)
        if fallback is not None and (fallback not in BACKENDS or fallback == backend):
            raise self.fail("fallback_backend",
                            f"another backend than {backend!r}, one of " + ", ".join(BACKENDS),
                            fallback)
        description = self.get(data, "description", required=False, default="")
        if not isinstance(description, str):
            raise self.fail("description", "a string", description)

        b = self.table(data, "batching", required=True)
        p = "batching."
        max_batch = self.integer(b, "max_batch_size", p, 0)
        preferred = self.get(b, "preferred_batch_sizes", p, required=False, default=[])
        if not isinstance(preferred, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) and 0 < x <= max(max_batch, 1)
                for x in preferred):
            raise self.fail(p + "preferred_batch_sizes",
                            f"a list of integers in 1..max_batch_size ({max_batch})", preferred)
        batching = BatchingConfig(
            max_batch_size=max_batch,
            preferred_batch_sizes=tuple(sorted(set(preferred))),
            max_queue_delay_us=self.integer(b, "max_queue_delay_us", p, 0),
            instances=self.integer(b, "instances", p, 1, minimum=1),
            threads=self.integer(b, "threads", p, 0),
            max_queue_size=self.integer(b, "max_queue_size", p, 0),
            default_timeout_us=self.integer(b, "default_timeout_us", p, 0),
        )

        t = self.table(data, "parity", required=True)
        parity = ParityTolerance(
            atol=self.number(t, "atol", "parity.", None),
            rtol=self.number(t, "rtol", "parity.", None),
            min_top1_agreement=self.number(t, "min_top1_agreement", "parity.", 1.0, maximum=1.0),
        )

        options = self.table(data, "options", required=False)
        for key, value in options.items():
            if key not in BACKENDS or not isinstance(value, dict):
                raise self.fail(f"options.{key}", "a table named after a backend ("
                                + ", ".join(BACKENDS) + ")", value)
        return DeviceProfile(name=name, arch=arch, backend=backend, precision=precision,
                             batching=batching, parity=parity, fallback_backend=fallback,
                             description=description, options=options, path=self.path)
