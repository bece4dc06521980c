"""Which parts of edgeship this installation has (its pip extras), for one-line refusals.

Each machine installs only what it runs: ``edgeship[agent]`` on a device,
``edgeship[console]`` on the operator's laptop, ``edgeship[pack]`` where bundles are
built. The three commands are always installed; a command whose extra is missing says so in one
line instead of failing on an import deep inside. Imports nothing beyond the standard library.
"""

from __future__ import annotations

import importlib.util

EXTRAS: dict[str, tuple[str, ...]] = {
    "agent": ("numpy", "grpc", "google.protobuf", "psutil", "zeroconf"),
    "console": ("textual", "grpc", "google.protobuf", "psutil", "zeroconf"),
    "pack": ("numpy", "onnx", "onnxruntime", "openvino"),
    "tune": ("plotext",),  # on top of [agent]
    "otel": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),  # agent tracing
    "trees": ("xgboost", "lightgbm", "sklearn", "skops", "onnxmltools", "skl2onnx"),  # + [pack]
    "fleet": ("paho",),  # [fleet] in agent.toml, edge-console fleet (docs/fleet.md)
}
"""Extra name -> the Python modules whose absence means that extra is not installed."""


def missing_modules(extra: str) -> tuple[str, ...]:
    """The modules of ``extra`` (a key of :data:`EXTRAS`) that cannot be imported here."""
    missing = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package is missing or broken
            found = False
        if not found:
            missing.append(module)
    return tuple(missing)


def refusal(extra: str, command: str) -> str | None:
    """None when ``extra`` is installed, else the one line ``command`` prints before exiting."""
    missing = missing_modules(extra)
    if not missing:
        return None
    return (f"{command} needs edgeship[{extra}] (not installed here: {', '.join(missing)}); "
            f"install it with: pip install 'edgeship[{extra}]'")
