"""The extras table the commands check (packager.extras) against pyproject.toml's extras."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from packager import extras

ROOT = Path(__file__).resolve().parents[2]
DIST_OF = {"numpy": "numpy", "grpc": "grpcio", "grpc_health": "grpcio-health-checking",
           "google.protobuf": "protobuf", "psutil": "psutil", "zeroconf": "zeroconf",
           "textual": "textual", "onnx": "onnx", "onnxruntime": "onnxruntime",
           "openvino": "openvino", "plotext": "plotext", "xgboost": "xgboost-cpu",
           "lightgbm": "lightgbm", "sklearn": "scikit-learn", "skops": "skops",
           "onnxmltools": "onnxmltools", "skl2onnx": "skl2onnx", "paho": "paho-mqtt",
           "opentelemetry.sdk": "opentelemetry-sdk",
           "opentelemetry.exporter.otlp.proto.http": "opentelemetry-exporter-otlp-proto-http"}


def _extra_dists(name: str) -> set[str]:
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    return {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in optional[name]}


@pytest.mark.parametrize("extra", sorted(extras.EXTRAS))
def test_each_checked_module_comes_with_its_extra(extra: str) -> None:
    dists = _extra_dists(extra)
    for module in extras.EXTRAS[extra]:
        assert DIST_OF[module] in dists, f"{module} is checked for [{extra}] but not in it"


def test_the_console_and_the_agent_extras_hold_no_foreign_parts() -> None:
    assert not _extra_dists("console") & {"onnx", "onnxruntime", "openvino", "numpy"}
    assert not _extra_dists("agent") & {"textual", "onnx", "openvino", "sqlite-utils"}
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {re.split(r"[<>=]", d, maxsplit=1)[0] for d in base} == {"cryptography", "rich"}


def test_installed_extras_are_not_refused() -> None:
    # the test environment holds [dev], which holds every extra
    for extra in extras.EXTRAS:
        assert extras.refusal(extra, f"cmd-{extra}") is None


def test_a_missing_extra_is_one_actionable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.EXTRAS, "pack", ("numpy", "edge_toolkit_no_such_module"))
    assert extras.refusal("pack", "edge-pack build") == (
        "edge-pack build needs edgeship[pack] (not installed here: "
        "edge_toolkit_no_such_module); install it with: pip install 'edgeship[pack]'")
