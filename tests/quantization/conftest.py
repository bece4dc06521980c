"""A digits CNN trained at test time (numpy, ~10 s), its calibration data, and a key pair."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from packager.bundle.signing import generate_keypair
from tests.support.digits_cnn import DigitsData, export_onnx, load_digits_split, train_digits_cnn


@dataclass(frozen=True)
class TrainedCnn:
    """The exported model, its data split, the calibration .npz and a signing key pair."""

    onnx: Path
    data: DigitsData
    calibration: Path
    keys: tuple[Path, Path]


@pytest.fixture(scope="session")
def trained_cnn(tmp_path_factory: pytest.TempPathFactory) -> TrainedCnn:
    root = tmp_path_factory.mktemp("digits")
    data = load_digits_split()
    net = train_digits_cnn(data)
    model = export_onnx(net, root / "digits.onnx")
    calibration = root / "calib.npz"
    np.savez(calibration, image=data.x_calib)
    return TrainedCnn(model, data, calibration, generate_keypair(root / "keys"))
