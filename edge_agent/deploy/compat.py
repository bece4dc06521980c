"""The rules a bundle must pass to be deployed on this device, in one place.

The deploy pipeline (:meth:`edge_agent.deploy.ModelManager.deploy`) applies them to the uploaded
file; :func:`preflight` (the management API's CheckDeploy) applies the same functions to a
bundle's manifest and signature before the upload, so that a deploy the agent would refuse is
refused before a byte is sent. Every refusal carries a :class:`Refusal` code and a message that
says what fixes it (``--allow-unsigned``, ``--trust KEY``, ``--force``, a higher version, space).

Compatibility rule (documented in docs/management-api.md): a bundle fits when its ``arch``
equals the device's (``aarch64`` and ``arm64`` are one arch, as are ``x86_64`` and ``amd64``)
and the runtime of its backend, or of its fallback backend, is installed here. Profile names
are not compared: ``x86_64-cpu-openvino-fp16`` runs wherever ``x86_64-cpu-openvino`` does.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from edge_agent.deploy.device import DeviceInfo, normalize_arch
from edge_agent.deploy.errors import (
    BundleTooLargeError,
    IncompatibleBundleError,
    InvalidBundleError,
    ManagerError,
    OverMemoryBudgetError,
    VersionInUseError,
    disk_full,
)
from packager.bundle.errors import (
    NoTrustedKeyError,
    PackagerError,
    UnsignedBundleError,
    UntrustedSignatureError,
)
from packager.bundle.format import MAX_MANIFEST_BYTES, MAX_TOTAL_BYTES
from packager.bundle.manifest import MANIFEST_NAME, Manifest
from packager.bundle.reader import check_manifest_signature, validate_manifest


class Refusal(StrEnum):
    """Why a bundle cannot be deployed here (the ``refusal`` of the error raised)."""

    INVALID = "invalid_bundle"
    TOO_LARGE = "too_large"
    INCOMPATIBLE = "incompatible"  # another arch, or no runtime for its backends
    UNSIGNED = "unsigned"  # fix: --allow-unsigned on the agent, or sign it
    NO_TRUST = "no_trust"  # fix: --trust KEY on the agent
    UNTRUSTED_KEY = "untrusted_key"  # fix: --trust KEY (the signer's public key)
    VERSION_CONFLICT = "version_conflict"  # fix: build with a higher version
    ALREADY_ACTIVE = "already_active"  # fix: --force
    NO_SPACE = "no_space"
    NO_MEMORY = "no_memory"  # fix: raise [agent] memory_budget_mib, unpin or remove a model


def _refused(error: ManagerError, refusal: Refusal) -> ManagerError:
    error.refusal = refusal.value
    return error


def refusal_of(exc: BaseException) -> str:
    """The :class:`Refusal` code of an error raised by these rules ("" for any other error)."""
    return str(getattr(exc, "refusal", "") or "")


def display_name(source: str | None) -> str | None:
    """The user's file name, safe to put in a message (printable, at most 200 characters)."""
    if not source:
        return None
    name = "".join(ch for ch in Path(source).name if ch.isprintable())[:200]
    return repr(name) if name else None


# -- the rules ----------------------------------------------------------------------------------

def check_fits(manifest: Manifest, device: DeviceInfo) -> str:
    """The backend that will serve ``manifest`` here; IncompatibleBundleError if none can."""
    what = (f"bundle {manifest.name} version {manifest.version} is built for profile "
            f"{manifest.profile} ({manifest.arch}, {manifest.backend})")
    here = (f"this device runs profile {device.profile} ({device.arch}, runtimes: "
            f"{', '.join(device.runtimes) or 'none'})")
    if normalize_arch(manifest.arch) != device.arch:
        raise _refused(IncompatibleBundleError(f"{what}, but {here}; deploy the bundle built "
                                               f"for {device.profile}"), Refusal.INCOMPATIBLE)
    for backend in (manifest.backend, manifest.fallback_backend):
        if backend and backend in device.runtimes:
            return backend
    raise _refused(IncompatibleBundleError(f"{what}, but {here}; install the runtime or deploy "
                                           f"the bundle built for {device.profile}"),
                   Refusal.INCOMPATIBLE)


def check_signature(manifest_bytes: bytes, manifest: Manifest, signature: bytes | None,
                    trusted_keys: Sequence[Path], allow_unsigned: bool, *,
                    label: str) -> str | None:
    """The signing key's id (None: unsigned, allowed here); InvalidBundleError saying which
    agent flag fixes a refusal."""
    try:
        return check_manifest_signature(manifest_bytes, manifest, signature, trusted_keys,
                                        allow_unsigned, label=label)
    except UnsignedBundleError:
        raise _refused(InvalidBundleError(
            f"{label}: the bundle is unsigned and this agent accepts signed bundles only; sign "
            "it (`edge-pack build --key KEY`) and start the agent with --trust KEY.pub, or "
            "start the agent with --allow-unsigned (development only)"),
            Refusal.UNSIGNED) from None
    except NoTrustedKeyError:
        raise _refused(InvalidBundleError(
            f"{label}: the bundle is signed but this agent trusts no signing key; start the "
            "agent with --trust KEY.pub (the public key of the key that signed it)"),
            Refusal.NO_TRUST) from None
    except UntrustedSignatureError as exc:
        raise _refused(InvalidBundleError(
            f"{exc}; to accept bundles from that signer start the agent with --trust "
            "SIGNER.pub"), Refusal.UNTRUSTED_KEY) from None
    except PackagerError as exc:
        raise _refused(InvalidBundleError(str(exc)), Refusal.INVALID) from None


def manifest_sha(model_dir: Path) -> str:
    """The sha256 of a version dir's manifest.json ("" when it cannot be read)."""
    try:
        return hashlib.sha256((model_dir / MANIFEST_NAME).read_bytes()).hexdigest()
    except OSError:
        return ""


def version_conflict(name: str, version: int) -> ManagerError:
    """The refusal of a version number already on disk with other content."""
    return _refused(VersionInUseError(
        f"{name} version {version} is already on this device with different content; "
        "build the new model with a higher version number (edge-pack build --version)"),
        Refusal.VERSION_CONFLICT)


def already_active(name: str, version: int) -> ManagerError:
    """The refusal of a deploy of the active version without force."""
    return _refused(VersionInUseError(f"{name} version {version} is already active; pass "
                                      "--force to reload it"), Refusal.ALREADY_ACTIVE)


def check_version_slot(models_dir: Path, name: str, version: int, sha: str,
                       active: int | None, force: bool) -> bool:
    """Whether ``name/version`` is already on disk with the same manifest (sha256 ``sha``).

    Raises VersionInUseError when it is there with other content (build a higher version), or
    when it is the active version and ``force`` is not given. A directory whose manifest cannot
    be read (left half on disk) is no conflict: the deploy extracts it again.
    """
    target = models_dir / name / str(version)
    if not target.exists():
        return False
    on_disk = manifest_sha(target)
    if on_disk and on_disk != sha:
        raise version_conflict(name, version)
    if version == active and not force:
        raise already_active(name, version)
    return bool(on_disk)


def extracted_bytes(manifest: Manifest) -> int:
    """What the version's files take once extracted."""
    return sum(f.size for f in manifest.files)


def check_disk_space(where: Path, need_bytes: int, what: str) -> None:
    """DiskFullError when the file system of ``where`` has fewer than ``need_bytes`` free."""
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need_bytes:
        raise _refused(disk_full(f"{what} ({need_bytes} bytes needed, {free} free)", where),
                       Refusal.NO_SPACE)


def check_upload_size(size_bytes: int) -> None:
    """Refuse an upload past the largest bundle an agent accepts."""
    if size_bytes > MAX_TOTAL_BYTES:
        raise _refused(BundleTooLargeError(f"the bundle is {size_bytes} bytes, more than the "
                                           f"{MAX_TOTAL_BYTES} an agent accepts"),
                       Refusal.TOO_LARGE)


MemoryCheck = Callable[[Manifest, "int | None"], None]
"""(manifest, the active version it replaces) -> raises MemoryBudgetError when it cannot fit."""


def check_memory(manifest: Manifest, active: int | None, memory: MemoryCheck | None) -> None:
    """OverMemoryBudgetError (with the figures) when the version cannot be loaded within the
    agent's memory budget, a hot swap counting the old and the new version at once."""
    if memory is None:
        return
    from edge_agent.core.residency import MemoryBudgetError

    try:
        memory(manifest, active)
    except MemoryBudgetError as exc:
        raise _refused(OverMemoryBudgetError(f"{manifest.name} version {manifest.version} "
                                             f"does not fit: {exc}"), Refusal.NO_MEMORY) from None


# -- before an upload -------------------------------------------------------------------------

@dataclass(frozen=True)
class DeployTarget:
    """What the rules read of this device."""

    device: DeviceInfo
    trusted_keys: tuple[Path, ...]
    allow_unsigned: bool
    models_dir: Path
    state_dir: Path
    active_version: Callable[[str], int | None]
    memory: MemoryCheck | None = None


@dataclass(frozen=True)
class PreflightResult:
    """Whether a deploy would pass the rules; ``refusal`` and ``message`` say why not."""

    ok: bool
    message: str
    refusal: str = ""
    name: str = ""
    version: int = 0
    backend: str = ""
    key_id: str = ""


def preflight(manifest_bytes: bytes, signature: bytes | None, size_bytes: int, *,
              target: DeployTarget, force: bool = False,
              label: str = "bundle") -> PreflightResult:
    """Apply every deploy rule that needs no more than the manifest, its signature and the
    bundle's size, in the pipeline's order: size, manifest, fit, signature, version, space."""
    try:
        check_upload_size(size_bytes)
        if len(manifest_bytes) > MAX_MANIFEST_BYTES:
            raise _refused(InvalidBundleError(f"{label}: manifest.json is larger than "
                                              f"{MAX_MANIFEST_BYTES} bytes"), Refusal.INVALID)
        try:
            manifest = Manifest.from_json(manifest_bytes)
            validate_manifest(manifest, label)
        except PackagerError as exc:
            raise _refused(InvalidBundleError(str(exc)), Refusal.INVALID) from None
    except ManagerError as exc:
        return PreflightResult(False, str(exc), refusal_of(exc))
    name, version = manifest.name, manifest.version
    try:
        backend = check_fits(manifest, target.device)
        key = check_signature(manifest_bytes, manifest, signature, target.trusted_keys,
                              target.allow_unsigned, label=label)
        sha = hashlib.sha256(manifest_bytes).hexdigest()
        present = check_version_slot(target.models_dir, name, version, sha,
                                     target.active_version(name), force)
        need = size_bytes + (0 if present else extracted_bytes(manifest))
        check_disk_space(target.state_dir, need, f"receive and extract {name} version "
                         f"{version}")
        check_memory(manifest, target.active_version(name), target.memory)
    except ManagerError as exc:
        return PreflightResult(False, str(exc), refusal_of(exc), name, version)
    signed = f"signed by key {key}" if key else "unsigned (allowed here)"
    return PreflightResult(True, f"{name} version {version} can be deployed: {signed}; "
                           f"served by {backend}", "", name, version, backend, key or "")
