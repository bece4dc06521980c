"""What this device runs, and whether a bundle fits it.

Compatibility rule (documented in docs/management-api.md): a bundle fits when its ``arch``
equals the device's (``aarch64`` and ``arm64`` are one arch, as are ``x86_64`` and ``amd64``)
and the runtime of its backend, or of its fallback backend, is installed here. Profile names
are not compared: ``x86_64-cpu-openvino-fp16`` runs wherever ``x86_64-cpu-openvino`` does.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from edge_agent.manager.errors import IncompatibleBundleError
from packager.manifest import Manifest

_ARCH_ALIASES = {"arm64": "aarch64", "amd64": "x86_64", "x64": "x86_64"}
_BACKEND_PREFERENCE = ("tensorrt", "openvino", "onnxruntime")


def normalize_arch(arch: str) -> str:
    """The canonical name of an arch (``arm64`` -> ``aarch64``, ``amd64`` -> ``x86_64``)."""
    a = arch.strip().lower()
    return _ARCH_ALIASES.get(a, a)


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """The device's arch, installed runtimes and the profile it reports running."""

    arch: str
    runtimes: tuple[str, ...]
    profile: str


def _default_profile(arch: str, runtimes: tuple[str, ...]) -> str:
    try:
        from packager.profiles import list_profiles

        profiles = [p for p in list_profiles()
                    if normalize_arch(p.arch) == arch and p.backend in runtimes]
    except Exception:  # profile files missing or broken: fall back to a derived name
        profiles = []
    for backend in _BACKEND_PREFERENCE:
        for p in sorted(profiles, key=lambda p: (p.precision != "fp32", p.name)):
            if p.backend == backend:
                return p.name
    best = next((b for b in _BACKEND_PREFERENCE if b in runtimes), "none")
    return f"{arch}-cpu-{best}"


def detect_device(profile: str | None = None) -> DeviceInfo:
    """This machine: ``platform.machine()``, the installed runtimes, and ``profile`` (or the
    best installed profile for the arch when None)."""
    # imported here: the console imports this module (check_compatible) and has no backends
    from edge_agent.backends.registry import available_backends

    arch = normalize_arch(platform.machine())
    runtimes = available_backends()
    return DeviceInfo(arch=arch, runtimes=runtimes,
                      profile=profile or _default_profile(arch, runtimes))


def check_compatible(manifest: Manifest, device: DeviceInfo) -> str:
    """The backend that will serve ``manifest`` here; IncompatibleBundleError if none can."""
    what = (f"bundle {manifest.name} version {manifest.version} is built for profile "
            f"{manifest.profile} ({manifest.arch}, {manifest.backend})")
    here = (f"this device runs profile {device.profile} ({device.arch}, runtimes: "
            f"{', '.join(device.runtimes) or 'none'})")
    if normalize_arch(manifest.arch) != device.arch:
        raise IncompatibleBundleError(f"{what}, but {here}; deploy the bundle built for "
                                      f"{device.profile}")
    for backend in (manifest.backend, manifest.fallback_backend):
        if backend and backend in device.runtimes:
            return backend
    raise IncompatibleBundleError(f"{what}, but {here}; install the runtime or deploy the "
                                  f"bundle built for {device.profile}")
