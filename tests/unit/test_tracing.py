"""Trace settings as Triton answers them, sampling, [trace] validation and the refusal when the
[otel] extra is missing (no server: edge_agent.tracing on its own)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edge_agent.config import load_config
from edge_agent.config.trace import TraceConfig
from edge_agent.errors import ConfigError, TraceSettingError
from edge_agent.tracing import Tracing
from edge_agent.tracing.settings import TraceSettings

COLLECTOR = TraceConfig(otlp_endpoint="http://127.0.0.1:9/v1/traces")


def test_rate_and_count_decide_which_requests_are_traced() -> None:
    settings = TraceSettings(COLLECTOR)
    assert not settings.active and settings.sample("m") is None
    settings.update("m", {"trace_level": ["TIMESTAMPS"], "trace_rate": ["3"],
                          "trace_count": ["2"]})
    assert settings.active
    taken = [settings.sample("m") for _ in range(9)]
    assert taken == [("TIMESTAMPS",), None, None, ("TIMESTAMPS",)] + [None] * 5
    assert settings.get("m")["trace_count"] == ["0"] and not settings.active
    assert settings.sample("other") is None  # the global level is still OFF


def test_a_model_follows_the_global_settings_until_set_and_a_cleared_one_falls_back() -> None:
    settings = TraceSettings(COLLECTOR)
    settings.update("", {"trace_rate": ["10"]})
    assert settings.get("m")["trace_rate"] == ["10"]
    settings.update("m", {"trace_rate": ["2"]})
    settings.update("", {"trace_rate": ["20"]})
    assert settings.get("m")["trace_rate"] == ["2"]
    settings.update("m", {"trace_rate": None})
    assert settings.get("m")["trace_rate"] == ["20"]
    settings.update("", {"trace_rate": []})
    assert settings.get("")["trace_rate"] == ["1000"]  # its value at start


@pytest.mark.parametrize(("settings", "words"), [
    ({"trace_file": ["t.json"]}, "'trace_file' is not served"),
    ({"log_frequency": ["5"]}, "'log_frequency' is not served"),
    ({"trace_mode": ["triton"]}, "only in mode 'opentelemetry'"),
    ({"trace_level": ["LOUD"]}, "unknown trace level"),
    ({"trace_count": ["-2"]}, "integer >= -1"),
    ({"trace_rate": ["1", "2"]}, "expected one value"),
    ({"bogus": ["1"]}, "'bogus' is unknown"),
])
def test_refusals_name_the_setting_and_change_nothing(settings: dict[str, list[str]],
                                                      words: str) -> None:
    tracing = Tracing(COLLECTOR)
    before = tracing.get("m")
    with pytest.raises(TraceSettingError, match=words):
        tracing.update("m", {"trace_rate": ["7"], **settings})
    assert tracing.get("m") == before


def test_a_level_needs_a_collector() -> None:
    with pytest.raises(TraceSettingError, match="otlp_endpoint"):
        Tracing().update("", {"trace_level": ["TENSORS"]})


def test_a_level_without_the_otel_extra_names_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if not installed
    with pytest.raises(TraceSettingError, match=r"pip install 'edgeship\[otel\]'"):
        Tracing(COLLECTOR).update("", {"trace_level": ["TIMESTAMPS"]})


@pytest.mark.parametrize(("text", "words"), [
    ('trace_level = "TIMESTAMPS"', "no collector is set"),
    ('otlp_endpoint = "127.0.0.1:4318"', "expected an OTLP/HTTP URL"),
    ('trace_rate = 0', "'trace_rate' must be an integer >= 1"),
    ('trace_file = "x"', "'trace.trace_file' is unknown"),
])
def test_the_trace_section_refuses_what_it_cannot_serve(tmp_path: Path, text: str,
                                                        words: str) -> None:
    (tmp_path / "agent.toml").write_text(f"[trace]\n{text}\n")
    with pytest.raises(ConfigError, match=words):
        load_config(tmp_path / "agent.toml", state_dir=tmp_path / "state")


def test_the_trace_section_sets_the_levels_at_start(tmp_path: Path) -> None:
    (tmp_path / "agent.toml").write_text(
        '[trace]\notlp_endpoint = "http://127.0.0.1:4318"\ntrace_level = ["tensors"]\n'
        "trace_rate = 1\n")
    config = load_config(tmp_path / "agent.toml", state_dir=tmp_path / "state").trace
    assert config.otlp_endpoint == "http://127.0.0.1:4318/v1/traces"
    assert TraceSettings(config).get() == {"trace_level": ["TENSORS"], "trace_rate": ["1"],
                                           "trace_count": ["-1"],
                                           "trace_mode": ["opentelemetry"]}
