"""Small XGBoost, LightGBM and scikit-learn models trained at test time, saved the way each
library saves them (XGBoost JSON and UBJ, LightGBM text, scikit-learn with skops)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from packager.bundle.signing import generate_keypair

pytest.importorskip("xgboost", reason="the [trees] extra is not installed")
pytest.importorskip("lightgbm", reason="the [trees] extra is not installed")
pytest.importorskip("skops", reason="the [trees] extra is not installed")


@dataclass(frozen=True)
class Trained:
    """A saved model file, rows to test on, and the library's own predict on them."""

    path: Path
    x_test: np.ndarray
    labels: np.ndarray | None  # classifiers
    scores: np.ndarray  # probabilities [rows, classes], or regression values [rows, 1]


@dataclass(frozen=True)
class TreeModels:
    models: dict[str, Trained]
    keys: tuple[Path, Path]


def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    return x[:1500], y[:1500], x[1500:]


def _train_all(root: Path) -> dict[str, Trained]:
    import lightgbm as lgb
    import skops.io as sio
    import xgboost as xgb
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier

    x, y, x_test = _digits()
    out: dict[str, Trained] = {}
    clf = xgb.XGBClassifier(n_estimators=20, max_depth=4, n_jobs=1, random_state=0)
    clf.fit(x, y)
    proba = clf.predict_proba(x_test)
    for ext in ("json", "ubj"):
        clf.save_model(str(root / f"xgb.{ext}"))
        out[f"xgboost-{ext}"] = Trained(root / f"xgb.{ext}", x_test, proba.argmax(1), proba)

    lgbm = lgb.LGBMClassifier(n_estimators=20, num_leaves=15, n_jobs=1, verbose=-1,
                              random_state=0)
    lgbm.fit(x, y)
    lgbm.booster_.save_model(str(root / "lgbm.txt"))
    p = lgbm.predict_proba(x_test)
    out["lightgbm"] = Trained(root / "lgbm.txt", x_test, p.argmax(1), p)

    rf = RandomForestClassifier(n_estimators=15, max_depth=8, n_jobs=1, random_state=0)
    rf.fit(x, y)
    sio.dump(rf, root / "forest.skops")
    out["sklearn-forest"] = Trained(root / "forest.skops", x_test, rf.predict(x_test),
                                    rf.predict_proba(x_test))

    xb, yb = make_classification(n_samples=600, n_features=12, random_state=0)
    xb = xb.astype(np.float32)
    binary = xgb.XGBClassifier(n_estimators=15, max_depth=3, n_jobs=1, random_state=0)
    binary.fit(xb[:500], yb[:500])
    binary.save_model(str(root / "binary.json"))
    pb = binary.predict_proba(xb[500:])
    out["xgboost-binary"] = Trained(root / "binary.json", xb[500:], pb.argmax(1), pb)

    xr, yr = make_regression(n_samples=500, n_features=8, random_state=0)
    xr = xr.astype(np.float32)
    gbr = GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0)
    gbr.fit(xr[:400], yr[:400])
    sio.dump(gbr, root / "regressor.skops")
    out["sklearn-regressor"] = Trained(root / "regressor.skops", xr[400:], None,
                                       gbr.predict(xr[400:]).reshape(-1, 1))
    return out


@pytest.fixture(scope="session")
def tree_models(tmp_path_factory: pytest.TempPathFactory) -> TreeModels:
    root = tmp_path_factory.mktemp("trees")
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        models = _train_all(root)
    return TreeModels(models, generate_keypair(root / "keys"))
