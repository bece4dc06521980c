"""Class labels of a model's outputs (``edge-pack build --labels``), checked and stored.

``--labels OUTPUT=FILE`` (repeatable) or ``--labels FILE`` for a single-output model; a FILE
holds one label per line (the label of class index *i* on line *i*). Stored in the manifest's
``labels`` and as the bundle file ``labels/OUTPUT.txt`` (docs/bundle-format.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from packager.bundle.datatypes import FIXED_SIZE
from packager.bundle.errors import UsageError
from packager.bundle.manifest import TensorSpec, label_file

MAX_LABEL_BYTES = 1024


def parse_label_args(values: Sequence[str]) -> dict[str, Path]:
    """``--labels`` values -> output name ("" for the model's only output) -> file."""
    out: dict[str, Path] = {}
    for value in values:
        name, sep, file = value.partition("=") if "=" in value else ("", "", value)
        if sep and not name:
            raise UsageError(f"--labels {value!r}: give OUTPUT=FILE, or FILE for a "
                             "single-output model")
        if name in out:
            raise UsageError(f"--labels names output {name or '(the only one)'!r} twice")
        out[name] = Path(file)
    return out


def _read(path: Path, output: str) -> tuple[str, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--labels for output '{output}': cannot read {path}: "
                         f"{exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--labels for output '{output}': {path} is not UTF-8 text") from None
    labels = tuple(line.rstrip("\r") for line in text.split("\n"))
    if labels and labels[-1] == "":
        labels = labels[:-1]
    if not labels:
        raise UsageError(f"--labels for output '{output}': {path} holds no labels")
    if any(len(x.encode()) > MAX_LABEL_BYTES for x in labels):
        raise UsageError(f"--labels for output '{output}': a label of {path} is longer than "
                         f"{MAX_LABEL_BYTES} bytes")
    return labels


def load_labels(files: Mapping[str, Path], outputs: Sequence[TensorSpec],
                batched: bool) -> dict[str, tuple[str, ...]]:
    """The labels of each output named in ``files``, checked against the model's outputs."""
    by_name = {o.name: o for o in outputs}
    labels: dict[str, tuple[str, ...]] = {}
    for name, path in files.items():
        if not name:
            if len(outputs) != 1:
                raise UsageError(f"--labels {path}: the model has {len(outputs)} outputs "
                                 f"({', '.join(by_name)}); name one: --labels OUTPUT={path}")
            name = outputs[0].name
        spec = by_name.get(name)
        if spec is None:
            raise UsageError(f"--labels {name}={path}: the model has no output '{name}' "
                             f"(its outputs: {', '.join(by_name)})")
        if spec.datatype not in FIXED_SIZE or spec.datatype == "BOOL":
            raise UsageError(f"--labels {name}={path}: output '{name}' is {spec.datatype}, not "
                             "numbers: it has no classes")
        labels[name] = _read(path, name)
        row = spec.shape[1:] if batched else spec.shape
        if all(d > 0 for d in row) and math.prod(row) != len(labels[name]):
            raise UsageError(f"--labels {name}={path}: {len(labels[name])} labels, but output "
                             f"'{name}' has {math.prod(row)} classes per row")
    return labels


def write_label_files(root: Path, labels: Mapping[str, Sequence[str]]) -> None:
    """Write ``labels/OUTPUT.txt`` of each output under the bundle's staging ``root``."""
    for name, lines in labels.items():
        path = root / label_file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
