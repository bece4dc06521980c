"""The registry as a bundle source (deploy by reference): check the reference against the
agent's ``[registry]`` settings, pull the manifest for this device's profile and its bundle
into a file (retries, resume of a cut download within the pull, every digest checked, the
declared size checked against the free space, an overall deadline, redirects only to allowed
hosts, nothing left behind on failure). What comes next is the
deploy pipeline, exactly as for an uploaded bundle. Protocol-free: no gRPC here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge_agent.config.management import RegistrySettings
from edge_agent.deploy import caller
from edge_agent.deploy.compat import check_disk_space
from edge_agent.deploy.device import DeviceInfo
from edge_agent.deploy.errors import InvalidBundleError, ManagerError, storage_error
from edge_agent.errors import AgentError, ErrorCode, InvalidInputError, ModelNotFoundError
from packager.bundle.errors import (
    ArtifactNotFoundError,
    ArtifactRejectedError,
    PackagerError,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
    TransferStoppedError,
    UsageError,
)
from packager.bundle.format import MAX_TOTAL_BYTES
from packager.bundle.oci.client import TransferGuard
from packager.bundle.oci.layout import Descriptor
from packager.bundle.oci.ref import (
    OciReference,
    OciReferenceError,
    RegistryNotAllowedError,
    RegistryPolicy,
    parse_reference,
)

if TYPE_CHECKING:
    from edge_agent.deploy.manager import ModelManager
    from edge_agent.deploy.outcome import DeployOutcome

log = logging.getLogger(__name__)


class RegistryRefusedError(ManagerError):
    """The reference is outside ``[registry] allow``, or the registry refused our
    credentials: nothing was pulled."""

    code = ErrorCode.FAILED_PRECONDITION


class RegistryDownError(ManagerError):
    """The registry did not answer, or went away mid-pull (after the retries). The message
    starts with ``registry: `` so that clients do not take it for the agent being down."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self, message: str) -> None:
        super().__init__(f"registry: {message}")


@dataclass(frozen=True)
class PullResult:
    """What was pulled: the pinned reference and the profile chosen."""

    reference: OciReference
    profile: str
    size: int


def check_reference(text: str, settings: RegistrySettings) -> OciReference:
    """Parse ``text`` strictly and apply the allow list (AgentError subclasses, one line)."""
    try:
        ref = parse_reference(text)
    except OciReferenceError as exc:
        raise InvalidInputError(str(exc)) from None
    if ref.digest is None:
        raise InvalidInputError(f"{ref} is not pinned to a digest; send REF@sha256:... (the "
                                "console resolves tags to digests first)")
    try:
        RegistryPolicy.parse(settings.allow, settings.insecure).check(ref)
    except RegistryNotAllowedError as exc:
        raise RegistryRefusedError(str(exc)) from None
    return ref


PULL_SPACE_MARGIN_BYTES = 16 << 20
"""Free space a pull leaves beyond the layer's declared size (the state and metrics stores
keep writing while a deploy runs)."""


class PullStoppedError(ManagerError):
    """The agent is stopping: the pull was ended and its partial file removed."""

    code = ErrorCode.UNAVAILABLE


def _agent_error(exc: PackagerError) -> AgentError:
    text = str(exc)
    if isinstance(exc, RegistryNotAllowedError):  # a redirect outside [registry] allow
        return RegistryRefusedError(text)
    if isinstance(exc, UsageError):
        return InvalidInputError(text)
    if isinstance(exc, TransferStoppedError):
        return PullStoppedError(text)
    if isinstance(exc, ArtifactNotFoundError):
        return ModelNotFoundError(text)
    if isinstance(exc, RegistryAuthError):
        return RegistryRefusedError(text + " (credentials: [registry] auth_file of this agent)")
    if isinstance(exc, RegistryUnavailableError):
        return RegistryDownError(text)
    if isinstance(exc, ArtifactRejectedError):
        return InvalidBundleError(text)
    if isinstance(exc, RegistryError):
        return RegistryDownError(text)
    return InvalidBundleError(text)


def pull_guard(settings: RegistrySettings) -> TransferGuard:
    """The guard of one pull: ``[registry] pull_timeout_s``; stopping it ends the pull."""
    return TransferGuard(settings.pull_timeout_s, deadline_hint="[registry] pull_timeout_s")


def _space_for(dest: Path) -> Callable[[Descriptor], None]:
    """The check before a layer is fetched: DiskFullError (the agent's wording) unless its
    declared size and the margin fit in ``dest``'s file system."""

    def check(layer: Descriptor) -> None:
        check_disk_space(dest.parent, layer.size + PULL_SPACE_MARGIN_BYTES,
                         f"pull a layer of {layer.size} bytes (+{PULL_SPACE_MARGIN_BYTES} "
                         "spare)")

    return check


def pull_for_device(text: str, settings: RegistrySettings, device: DeviceInfo, dest: Path, *,
                    on_progress: Callable[[int, int], None] | None = None,
                    max_bytes: int = MAX_TOTAL_BYTES,
                    guard: TransferGuard | None = None) -> PullResult:
    """Pull the bundle ``text`` (``oci://...@sha256:...``) holds for ``device`` into ``dest``
    (which must not exist). The layer's declared size must fit on the disk first; redirects
    are followed only to hosts in ``[registry] allow``; the whole pull ends by
    ``[registry] pull_timeout_s`` (or when ``guard`` is stopped). On any failure ``dest`` is
    removed and an AgentError raised: no partial file outlives its pull."""
    from packager.bundle.oci.client import RegistryClient, RegistryOptions, credentials_from_config
    from packager.bundle.oci.layout import PROFILE, choose_entry
    from packager.bundle.oci.transfer import pull_bundle, resolve

    ref = check_reference(text, settings)
    policy = RegistryPolicy.parse(settings.allow, settings.insecure)
    guard = guard or pull_guard(settings)
    started = time.monotonic()
    log.info("pulling %s for profile %s by %s", ref, device.profile, caller.current())
    try:
        with guard:
            creds = (credentials_from_config(settings.auth_file, ref.registry, required=True)
                     if settings.auth_file is not None else None)
            options = RegistryOptions(insecure=policy.is_insecure(ref), credentials=creds,
                                      ca_file=settings.ca_file, retries=settings.retries,
                                      redirect_check=policy.check_redirect, guard=guard)
            resolved = resolve(ref, options)
            entry = choose_entry(resolved.entries, device.profile, device.arch,
                                 device.runtimes, str(ref))
            client = RegistryClient(resolved.reference, options)
            pull_bundle(client, entry, dest, max_bytes=max_bytes, on_progress=on_progress,
                        before_download=_space_for(dest), keep_partial=False)
    except PackagerError as exc:
        with contextlib.suppress(OSError):
            dest.unlink()
        raise _agent_error(exc) from None
    except OSError as exc:  # writing the layer: a full disk, a read-only state dir
        with contextlib.suppress(OSError):
            dest.unlink()
        error = storage_error(exc, "store the pulled layer", dest.parent)
        if error is None:
            raise
        raise error from None
    except BaseException as exc:
        with contextlib.suppress(OSError):
            dest.unlink()
        log.warning("pull of %s stopped after %.1f s: %s", ref, time.monotonic() - started,
                    exc)
        raise
    result = PullResult(ref, str(entry.annotations.get(PROFILE)), dest.stat().st_size)
    log.info("pulled %s: layer %s (%s), %d bytes in %.1f s", ref, entry.digest,
             result.profile, result.size, time.monotonic() - started)
    return result


def deploy_by_reference(manager: ModelManager, text: str, settings: RegistrySettings, *,
                        guard: TransferGuard | None = None) -> DeployOutcome:
    """Deploy by reference without a protocol around it (the fleet link): the same pull
    (:func:`pull_for_device`: allow list, digests, space, deadline) into a fresh incoming file,
    then the same pipeline as an upload (signature, parity, hot swap, automatic rollback).
    Pull failures raise AgentError; pipeline failures are outcomes. The file is removed."""
    path = manager.new_upload_path()
    try:
        pull_for_device(text, settings, manager.device, path, guard=guard)
        return manager.deploy(path, source="bundle", origin=text)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
