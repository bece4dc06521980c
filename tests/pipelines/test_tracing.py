"""Triton's trace extension: settings changed with the unmodified tritonclient (gRPC and
HTTP), and the spans of a traced pipeline request and of a Python model's ``ctx.infer``
received by a real OTLP/HTTP receiver on 127.0.0.1 port 0 (edge_agent.tracing.receiver:
an HTTP server decoding ``ExportTraceServiceRequest`` with opentelemetry-proto)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from edge_agent.config.trace import TraceConfig
from edge_agent.tracing.receiver import Receiver
from tests.pipelines.conftest import Built, running_agent
from tests.pipelines.test_bls import _bundle
from tests.pipelines.test_pipeline_serving import images

pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                    reason="the [otel] extra (opentelemetry-sdk, "
                           "opentelemetry-exporter-otlp-proto-http)")

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def _children(spans: list[Any], parent: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in spans:
        if s.parent_span_id == parent.span_id and s.trace_id == parent.trace_id:
            out.setdefault(s.name, []).append(s)
    return out


def _check_timed(spans: list[Any], parent: Any) -> None:
    """``parent`` has a queue and a compute span inside it, compute after the queue."""
    kids = _children(spans, parent)
    (queue,), (compute,) = kids["queue"], kids["compute"]
    assert parent.start_time_unix_nano <= queue.start_time_unix_nano
    assert queue.end_time_unix_nano <= compute.start_time_unix_nano
    assert compute.end_time_unix_nano <= parent.end_time_unix_nano
    assert [e.name for e in compute.events] == ["compute start", "compute end"]


def test_a_pipeline_request_and_a_ctx_infer_are_traced_in_the_callers_trace(
        built: Built, tmp_path: Path, receiver: Receiver) -> None:
    config = TraceConfig(otlp_endpoint=receiver.url)  # OFF at start: turned on by the client
    with running_agent(tmp_path / "agent", built.public_key, http=True, trace=config,
                       log_control=True) as agent:
        for name in ("mlp", "prep", "post", "classify"):
            assert agent.deploy(built.bundles[name]).ok, name
        assert agent.deploy(_bundle(tmp_path, built, "gate", "gate")).ok
        with grpcclient.InferenceServerClient(agent.tcp) as client:
            assert "trace" in client.get_server_metadata().extensions
            # the global settings stay OFF; the two models are traced, every request
            for model, levels in (("classify", ["TIMESTAMPS"]),
                                  ("gate", ["TIMESTAMPS", "TENSORS"])):
                after = client.update_trace_settings(
                    model_name=model, settings={"trace_level": levels, "trace_rate": "1"},
                    as_json=True)
                assert after["settings"]["trace_level"]["value"] == levels
                assert after["settings"]["trace_rate"]["value"] == ["1"]
            glob = client.get_trace_settings(as_json=True)["settings"]
            assert glob["trace_level"]["value"] == ["OFF"]
            data = np.array([[b] for b in images(2)], dtype=object)
            inp = grpcclient.InferInput("IMAGE", list(data.shape), "BYTES")
            inp.set_data_from_numpy(data)
            parent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
            client.infer("classify", [inp], headers={"traceparent": parent})
            x = np.ones((2, 64), np.float32)
            gate_in = grpcclient.InferInput("input", list(x.shape), "FP32")
            gate_in.set_data_from_numpy(x)
            client.infer("gate", [gate_in])
            client.infer("mlp", [gate_in])  # mlp is not traced itself: no root of its own
        spans = receiver.wait_for({"infer classify", "infer gate", "call prep", "call mlp",
                                   "call post"})
    roots = {s.name: s for s in spans if s.name.startswith("infer ")}
    assert set(roots) == {"infer classify", "infer gate"}
    root = roots["infer classify"]
    assert root.trace_id.hex() == CALLER_TRACE and root.parent_span_id.hex() == CALLER_SPAN
    names = [e.name for e in root.events]
    assert names[0] == "request received" and names[-1] == "response sent"
    assert "batch formed" in names  # its batch; compute start/end are the compute span's
    kids = _children(spans, root)
    steps = [kids[f"call {m}"][0] for m in ("prep", "mlp", "post")]
    assert [s.start_time_unix_nano for s in steps] == sorted(s.start_time_unix_nano
                                                              for s in steps)
    for step in steps:  # each step: its own queue and compute spans, inside the pipeline's
        _check_timed(spans, step)
        assert root.start_time_unix_nano <= step.start_time_unix_nano
        assert step.end_time_unix_nano <= root.end_time_unix_nano
    _check_timed(spans, root)
    gate = roots["infer gate"]
    assert gate.trace_id.hex() != CALLER_TRACE and not gate.parent_span_id  # a new trace
    tensors = {a.key: a.value for a in gate.attributes}  # TENSORS: the request's tensors
    assert [v.int_value for v in tensors["input.input.shape"].array_value.values] == [2, 64]
    assert tensors["output.probs.datatype"].string_value == "float32"
    assert not any(a.key.startswith("input.") for a in root.attributes)  # TIMESTAMPS only
    (bls,) = _children(spans, gate)["call mlp"]  # ctx.infer from the runtime process
    _check_timed(spans, bls)


def test_trace_settings_are_answered_as_triton_answers_them(built: Built,
                                                            tmp_path: Path) -> None:
    with running_agent(tmp_path / "agent", built.public_key, http=True,
                       log_control=True) as agent:
        http = httpclient.InferenceServerClient(agent.http)
        try:
            assert "trace" in http.get_server_metadata()["extensions"]
            assert http.get_trace_settings() == {
                "trace_level": ["OFF"], "trace_rate": ["1000"], "trace_count": ["-1"],
                "trace_mode": ["opentelemetry"]}
            # a model's settings follow the global ones until set; None clears one
            after = http.update_trace_settings(settings={"trace_rate": "50",
                                                         "trace_count": "7"})
            assert after["trace_rate"] == ["50"] and after["trace_count"] == ["7"]
            model = http.update_trace_settings("mlp", {"trace_rate": "5"})
            assert model["trace_rate"] == ["5"] and model["trace_count"] == ["7"]
            assert http.update_trace_settings("mlp", {"trace_rate": None})["trace_rate"] == \
                ["50"]
            assert http.update_trace_settings(settings={"trace_rate": None})["trace_rate"] == \
                ["1000"]
            for name, value, words in (
                    ("trace_file", "/tmp/t.json", "otlp_endpoint"),
                    ("log_frequency", "10", "not served"),
                    ("trace_bogus", "1", "unknown"),
                    ("trace_rate", "0", "integer >= 1"),
                    ("trace_level", ["OFF", "TENSORS"], "cannot be combined"),
                    ("trace_level", ["TIMESTAMPS"], "no collector is configured")):
                with pytest.raises(InferenceServerException) as err:
                    http.update_trace_settings(settings={name: value})
                assert words in str(err.value), (name, str(err.value))
            assert http.get_trace_settings()["trace_level"] == ["OFF"]  # nothing half-applied
        finally:
            http.close()
        with grpcclient.InferenceServerClient(agent.tcp) as client:
            with pytest.raises(InferenceServerException) as err:
                client.update_trace_settings(settings={"trace_file": "x"})
            assert "INVALID_ARGUMENT" in str(err.value.status())
            got = client.get_trace_settings(model_name="mlp", as_json=True)["settings"]
            assert got["trace_count"]["value"] == ["7"]


def test_trace_settings_are_read_by_anyone_and_changed_only_with_log_control(
        built: Built, tmp_path: Path) -> None:
    """One rule for the trace and logging extensions: any local caller reads the settings;
    changing them needs ``[grpc] log_control = true`` (before: anyone could turn on tracing of
    every request)."""
    with running_agent(tmp_path / "agent", built.public_key, http=True) as agent:
        http = httpclient.InferenceServerClient(agent.http)
        try:
            before = http.get_trace_settings()
            assert http.get_trace_settings(model_name="mlp") == before
            with pytest.raises(InferenceServerException) as refused:
                http.update_trace_settings(settings={"trace_rate": "5"})
            assert "log_control" in str(refused.value), str(refused.value)
            with pytest.raises(InferenceServerException) as refused:
                http.update_trace_settings("mlp", {"trace_count": "3"})
            assert "log_control" in str(refused.value), str(refused.value)
            assert http.get_trace_settings() == before  # nothing changed
        finally:
            http.close()
        with grpcclient.InferenceServerClient(agent.tcp) as client:
            got = client.get_trace_settings(as_json=True)["settings"]
            assert got["trace_rate"]["value"] == before["trace_rate"]
            with pytest.raises(InferenceServerException) as err:
                client.update_trace_settings(settings={"trace_rate": "5"})
            assert "UNAVAILABLE" in str(err.value.status()) and "log_control" in str(err.value)
            with pytest.raises(InferenceServerException) as err:
                client.update_trace_settings(model_name="mlp", settings={"trace_level": ["OFF"]})
            assert "log_control" in str(err.value)
            got = client.get_trace_settings(model_name="mlp", as_json=True)["settings"]
            assert got["trace_rate"]["value"] == before["trace_rate"]
