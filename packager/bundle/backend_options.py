"""Typed views of ``manifest.backend_options[backend]``: the keys the agent acts on, each
checked for its type when read (BundleError naming the key).

Other keys of those objects are informational (``edge-pack inspect`` shows them) and ignored
here, so a bundle written by a newer packager that adds one still loads::

    ov = OpenVinoOptions.of(manifest)      # ov.performance_hint, ov.num_streams, ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from packager.bundle.errors import BundleError
from packager.bundle.manifest import Manifest

T = TypeVar("T", bound="_Options")


def _kind(kind: type | tuple[type, ...], default: Any = None) -> Any:
    if isinstance(default, dict):
        return field(default_factory=dict, metadata={"kind": kind})
    return field(default=default, metadata={"kind": kind})


@dataclass(frozen=True)
class _Options:
    """Shared reading: every dataclass field carries its expected JSON type in metadata."""

    backend: ClassVar[str]

    @classmethod
    def of(cls: type[T], manifest: Manifest) -> T:
        """The options ``manifest`` carries for this backend (defaults for absent keys)."""
        raw = manifest.backend_options.get(cls.backend, {})
        if not isinstance(raw, dict):
            raise BundleError(f"manifest of {manifest.name!r}: backend_options.{cls.backend} "
                              f"must be an object, not {raw!r}")
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in raw or raw[f.name] is None:
                continue
            value, kind = raw[f.name], f.metadata["kind"]
            names = (kind,) if isinstance(kind, type) else kind
            if (isinstance(value, bool) and bool not in names) or not isinstance(value, kind):
                raise BundleError(
                    f"manifest of {manifest.name!r}: backend_options.{cls.backend}.{f.name} "
                    f"must be {' or '.join(t.__name__ for t in names)}, not {value!r}")
            kw[f.name] = tuple(value) if isinstance(value, list) else value
        return cls(**kw)


@dataclass(frozen=True)
class OnnxRuntimeOptions(_Options):
    """``backend_options.onnxruntime``."""

    backend: ClassVar[str] = "onnxruntime"
    allow_spinning: bool = _kind(bool, False)
    """Intra-op threads spin-wait (off by default: they took CPU the gRPC threads needed)."""


@dataclass(frozen=True)
class OpenVinoOptions(_Options):
    """``backend_options.openvino`` (the agent lays ``[models.NAME] openvino_hint`` and
    ``openvino_streams`` over the first and third)."""

    backend: ClassVar[str] = "openvino"
    performance_hint: str | None = _kind(str)
    inference_precision: str | None = _kind(str)
    num_streams: int | None = _kind(int)
    enable_cpu_pinning: bool = _kind(bool, False)


@dataclass(frozen=True)
class TensorRtOptions(_Options):
    """``backend_options.tensorrt``: the engine build spec and the prebuilt engines."""

    backend: ClassVar[str] = "tensorrt"
    precision: str | None = _kind(str)
    min_batch: int | None = _kind(int)
    opt_batch: int | None = _kind(int)
    max_batch: int | None = _kind(int)
    workspace_mb: int | None = _kind(int)
    engines: Mapping[str, str] = _kind(dict, default={})
    """``<TRT version>-<GPU>`` -> engine path in the bundle."""


@dataclass(frozen=True)
class PythonOptions(_Options):
    """``backend_options.python``: the entry point and the distributions it needs."""

    backend: ClassVar[str] = "python"
    entry: str = _kind(str, "")
    requires: tuple[str, ...] = _kind(list, ())
    calling: str = _kind(str, "context")
    """"context": ``fn(inputs, ctx)`` over the batch; "requests": PyTriton's list of requests
    (packager/bundle/function_signature.py)."""


@dataclass(frozen=True)
class PipelineOptions(_Options):
    """``backend_options.pipeline``: the steps (also in ``pipeline.json``)."""

    backend: ClassVar[str] = "pipeline"
    steps: tuple[Any, ...] = _kind(list, ())
