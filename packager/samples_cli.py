"""``edge-pack sample``: write a sample model the toolkit generates itself (no downloads)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from packager.bundle.errors import UsageError

_EPILOG = """\
Seeded, so the same command writes the same model. For trying the toolkit (the README's
Quickstart builds from these), not for production.

examples:
  edge-pack sample mlp --out model.onnx                        # input [batch, 64] -> 10 scores
  edge-pack sample cnn --out cnn.onnx --calibration-data calib.npz   # image [batch, 1, 16, 16]
  edge-pack sample xgboost --out model.json    # binary classifiers, 12 features ([trees] extra):
  edge-pack sample lightgbm --out model.txt    #   XGBoost JSON, LightGBM text,
  edge-pack sample sklearn --out forest.skops  #   a scikit-learn random forest saved with skops
"""

KINDS = ("mlp", "cnn", "xgboost", "lightgbm", "sklearn")


def add_sample_command(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Register ``sample`` on edge-pack's subparsers."""
    s = sub.add_parser("sample", help="write a sample model (MLP, CNN, trees) to try the tools",
                       formatter_class=fmt, epilog=_EPILOG,
                       description="Write a small seeded model: an ONNX MLP, an ONNX CNN (with "
                                   "calibration data for int8), or a tree classifier "
                                   "(XGBoost, LightGBM, scikit-learn) trained on synthetic "
                                   "rows.")
    s.add_argument("kind", choices=KINDS, metavar="KIND", help=", ".join(KINDS))
    s.add_argument("--out", required=True, type=Path, metavar="FILE",
                   help="where to write the model (.onnx; xgboost .json/.ubj, lightgbm "
                        ".txt, sklearn .skops)")
    s.add_argument("--calibration-data", type=Path, metavar="FILE.npz",
                   help="cnn only: also write representative inputs for "
                        "`edge-pack build --calibration-data`")


def run(args: argparse.Namespace) -> int:
    """Write the sample ``args.kind`` asks for and print what was written."""
    from packager.extras import refusal

    if refused := refusal("pack", "edge-pack sample"):
        raise UsageError(refused)
    from packager import samples

    if args.calibration_data is not None and args.kind != "cnn":
        raise UsageError("--calibration-data goes with the cnn sample only")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.kind == "mlp":
        samples.make_mlp(args.out)
    elif args.kind == "cnn":
        samples.make_cnn(args.out, calibration=args.calibration_data)
    elif refused := refusal("trees", f"edge-pack sample {args.kind}"):
        raise UsageError(refused)
    else:
        samples.make_tree_model(args.out, args.kind)
    print(f"wrote {args.out}" + (f" and {args.calibration_data}" if args.calibration_data
                                 else ""))
    return 0
