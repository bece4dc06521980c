"""Checks shared by the reliability tests: database integrity, what a version serves."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

X = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
DATABASES = ("state.db", "metrics.db")


def integrity(state_dir: Path) -> dict[str, str]:
    """``PRAGMA integrity_check`` of every database in ``state_dir`` (name -> result)."""
    out = {}
    for name in DATABASES:
        path = state_dir / name
        assert path.exists(), f"{path} is missing"
        con = sqlite3.connect(path)
        try:
            out[name] = con.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            con.close()
    return out


def served_version(address: str, x: np.ndarray = X) -> tuple[str, np.ndarray]:
    """One tritonclient inference of ``mlp``: (model_version, probs)."""
    import tritonclient.grpc as tc

    with tc.InferenceServerClient(address) as triton:
        inp = tc.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = triton.infer("mlp", [inp])
    return result.get_response().model_version, result.as_numpy("probs")
