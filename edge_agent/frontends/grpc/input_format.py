"""A bundle's declared input layouts as ModelConfig reports them (``ModelInput.format``)."""

from __future__ import annotations

from typing import cast

from edge_agent.frontends.grpc.generated import model_config_pb2 as mc
from packager.bundle.manifest import Manifest


def input_format(manifest: Manifest, name: str) -> mc.ModelInput.Format:
    """FORMAT_NCHW / FORMAT_NHWC when the bundle declares input ``name``'s layout, else
    FORMAT_NONE (Triton's default)."""
    declared = manifest.input_formats.get(name)
    # protoc's .pyi types enum values as Format; at run time they are ints
    return cast(mc.ModelInput.Format,
                mc.ModelInput.Format.Value(f"FORMAT_{declared}" if declared else "FORMAT_NONE"))
