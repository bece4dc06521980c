"""Input formats: which image inputs are laid out NCHW or NHWC (Triton's ``ModelInput.format``).

A bundle may say how an image input's three non-batch dims are ordered, so clients such as
Triton's ``image_client.py`` read the layout from ModelConfig (``FORMAT_NCHW``/``FORMAT_NHWC``)
instead of guessing. Set with ``edge-pack build --input-format NAME=NCHW`` (ONNX models) or a
spec's ``input_formats = { NAME = "NHWC" }`` (Python models, pipelines); kept in the manifest's
optional ``input_formats`` key. The agent only reports it: it never transposes data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from packager.bundle.errors import BundleError

FORMATS = ("NCHW", "NHWC")
"""The layouts an input may declare (Triton's FORMAT_NCHW and FORMAT_NHWC)."""


def parse_input_format_flags(flags: Iterable[str]) -> dict[str, str]:
    """``NAME=FORMAT`` command-line values as {input name: format}; BundleError if malformed."""
    out: dict[str, str] = {}
    for flag in flags:
        name, sep, fmt = flag.rpartition("=")
        if not sep or not name:
            raise BundleError(f"--input-format {flag!r} must be NAME=FORMAT, FORMAT one of "
                              f"{', '.join(FORMATS)} (e.g. --input-format data_0=NCHW)")
        if name in out:
            raise BundleError(f"--input-format names input {name!r} twice; give it once")
        out[name] = fmt
    return out


def check_input_formats(formats: object,
                        shapes: Mapping[str, Sequence[int]]) -> dict[str, str]:
    """``formats`` checked against the model's inputs (name -> shape without the batch dim):
    each names an input, is NCHW or NHWC, and the input has three dims (an image)."""
    if not isinstance(formats, Mapping):
        raise BundleError("input_formats must map input names to NCHW or NHWC")
    out: dict[str, str] = {}
    for name, fmt in formats.items():
        if name not in shapes:
            raise BundleError(f"input format for {name!r}: the model has no such input "
                              f"(inputs: {', '.join(shapes) or 'none'})")
        if fmt not in FORMATS:
            raise BundleError(f"input format {fmt!r} for {name!r} must be one of "
                              f"{', '.join(FORMATS)}")
        if len(shapes[name]) != 3:
            raise BundleError(f"input format {fmt} for {name!r}: the input has shape "
                              f"{list(shapes[name])} besides the batch dim; a format needs "
                              "three dims (channels, height, width in some order)")
        out[str(name)] = str(fmt)
    return out
