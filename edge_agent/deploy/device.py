"""What this device runs (arch, installed runtimes, the profile it reports).

Whether a bundle fits it is a deploy rule: :func:`edge_agent.deploy.compat.check_fits`.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

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
        from packager.bundle.profiles import list_profiles

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
    # imported here: the console imports this module (compat.check_fits) and has no backends
    from edge_agent.backends.registry import available_backends

    arch = normalize_arch(platform.machine())
    runtimes = available_backends()
    return DeviceInfo(arch=arch, runtimes=runtimes,
                      profile=profile or _default_profile(arch, runtimes))
