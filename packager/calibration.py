"""Representative inputs for static int8 quantization (``edge-pack build --calibration-data``).

An ``.npz`` file with one array per model input, keyed by input name, or a directory of
``NAME.npy`` files; the leading dim of every array is the sample index. The rows are split in
two: the first part calibrates the quantizer, the last part (held out) measures parity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from packager.bundle.datatypes import NUMPY_DTYPES
from packager.bundle.errors import UsageError
from packager.bundle.manifest import TensorSpec
from packager.bundle.parity import require_one_array_per_input

FLAG = "--calibration-data"
HELD_OUT_SHARE = 0.2  # of the samples, for the parity check (never seen by the quantizer)
MIN_SAMPLES = 2


@dataclass(frozen=True)
class CalibrationData:
    """Samples by input name, split into calibration rows and held-out rows."""

    origin: str  # the file or directory name the user gave
    calibrate: dict[str, np.ndarray]
    held_out: dict[str, np.ndarray]

    @property
    def sizes(self) -> tuple[int, int]:
        """(calibration samples, held-out samples)."""
        first = next(iter(self.calibrate))
        return len(self.calibrate[first]), len(self.held_out[first])


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    if path.is_dir():
        files = sorted(path.glob("*.npy"))
        if not files:
            raise UsageError(f"{FLAG} {path}: the directory holds no NAME.npy files (one per "
                             "model input, named after the input)")
        out: dict[str, np.ndarray] = {}
        for f in files:
            try:
                out[f.stem] = np.load(f, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise UsageError(f"{FLAG} {f}: not a readable .npy array ({exc})") from None
        return out
    if not path.exists():
        raise UsageError(f"{FLAG} {path}: no such file or directory")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise ValueError("a single array, not an .npz of named arrays")
            return {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise UsageError(f"{FLAG} {path}: not a readable .npz file of named arrays "
                         f"({exc})") from None


def load_calibration(path: Path, inputs: Sequence[TensorSpec], batched: bool) -> CalibrationData:
    """Read and check ``path`` against the model's inputs; UsageError naming the input at fault.

    Every input needs an array of the model's dtype kind (ints may feed wider ints, floats
    wider or narrower floats), its shape with the leading sample dim, and the same number of
    samples as the others. An unbatched model is fed one sample at a time.
    """
    path = Path(path)
    given = _read_arrays(path)
    require_one_array_per_input(f"{FLAG} {path}", given, inputs)
    arrays: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for spec in inputs:
        arr = given[spec.name]
        if spec.datatype == "BYTES":
            raise UsageError(f"{FLAG} {path}: input {spec.name!r} takes BYTES, which cannot be "
                             "calibrated; quantize a model with numeric inputs")
        dtype = np.dtype(NUMPY_DTYPES[spec.datatype])
        if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "f") != (dtype.kind == "f"):
            raise UsageError(f"{FLAG} {path}: input {spec.name!r} is {arr.dtype}, the model "
                             f"takes {spec.datatype}")
        # one sample per row: with a batch dim the sample shape is the model's shape
        want = list(spec.shape) if batched else [-1, *spec.shape]
        fixed = [(i, d) for i, d in enumerate(want) if d >= 0 and i > 0]
        if arr.ndim != len(want) or any(arr.shape[i] != d for i, d in fixed):
            sample = "[samples, " + ", ".join("?" if d < 0 else str(d) for d in want[1:]) + "]"
            raise UsageError(f"{FLAG} {path}: input {spec.name!r} has shape {list(arr.shape)}, "
                             f"expected {sample} (? : any size)")
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise UsageError(f"{FLAG} {path}: input {spec.name!r} holds NaN or infinite values")
        counts[spec.name] = int(arr.shape[0])
        arrays[spec.name] = np.ascontiguousarray(arr.astype(dtype, copy=False))
    if len(set(counts.values())) > 1:
        raise UsageError(f"{FLAG} {path}: the inputs have different numbers of samples "
                         f"({', '.join(f'{k}: {v}' for k, v in counts.items())}); give the same "
                         "number for every input")
    n = next(iter(counts.values()))
    if n < MIN_SAMPLES:
        raise UsageError(f"{FLAG} {path}: {n} sample(s); give at least {MIN_SAMPLES} (a few "
                         "hundred representative ones calibrate best)")
    held = max(1, round(n * HELD_OUT_SHARE))
    return CalibrationData(
        origin=path.name,
        calibrate={k: a[:n - held] for k, a in arrays.items()},
        held_out={k: a[n - held:] for k, a in arrays.items()},
    )
