"""``/metrics``: Triton's metric names and the agent's own, read at scrape time."""

from __future__ import annotations

import http.client
import re
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as th

from edge_agent.core.dataplane import DataPlane
from edge_agent.frontends.http.prometheus import AgentCollector, MetricsPage
from edge_agent.state import StateStore
from edge_agent.state.records import DeploymentKind, Step, VersionRecord
from tests.agent_http.conftest import HttpAgent
from tests.support.eventually import eventually

_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a text exposition: (name, labels) -> value."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, line
        labels = frozenset(_LABEL.findall(m.group("labels") or ""))
        out[(m.group("name"), labels)] = float(m.group("value"))
    return out


def scrape(agent: HttpAgent) -> tuple[str, dict]:
    host, _, port = agent.http.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/plain")
    finally:
        conn.close()
    return body, parse(body)


def _mv(model: str, version: str) -> frozenset[tuple[str, str]]:
    return frozenset({("model", model), ("version", version)})


def _infer(client: th.InferenceServerClient, model: str, version: str, x: np.ndarray) -> None:
    inp = th.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    client.infer(model, [inp], model_version=version)


def test_triton_counters_follow_inferences(http_agent: HttpAgent, triton_http) -> None:
    _, before = scrape(http_agent)
    count0 = before.get(("nv_inference_count", _mv("mlp", "2")), 0.0)
    success0 = before.get(("nv_inference_request_success", _mv("mlp", "2")), 0.0)
    x = np.random.default_rng(31).random((3, 64), dtype=np.float32)
    for _ in range(4):
        _infer(triton_http, "mlp", "2", x)  # same request: 1 miss, then cache hits
    text, after = scrape(http_agent)
    assert after[("nv_inference_request_success", _mv("mlp", "2"))] == success0 + 4
    # Triton's meaning: hits are successful requests but not inferences
    assert after[("nv_inference_count", _mv("mlp", "2"))] == count0 + 3
    for name in ("nv_inference_exec_count",
                 "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                 "nv_inference_compute_infer_duration_us"):
        assert (name, _mv("mlp", "2")) in after, name
    for reason in ("REJECTED", "CANCELED", "BACKEND"):  # failures by reason, as Triton's
        labels = frozenset({("model", "mlp"), ("version", "2"), ("reason", reason)})
        assert ("nv_inference_request_failure", labels) in after, reason
    assert after[("nv_cache_num_hits_per_model", _mv("mlp", "2"))] >= 3
    assert ("nv_cache_num_misses_per_model", _mv("mlp", "2")) in after
    assert "# TYPE nv_inference_count" in text
    assert after[("edge_model_active_version", frozenset({("model", "mlp")}))] in (1, 2)
    assert after[("edge_model_version_ready", _mv("squeezenet_ov", "1"))] == 1


def test_device_gauges_appear_once_the_recorder_sampled(http_agent: HttpAgent) -> None:
    def sampled() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        _, samples = scrape(http_agent)
        return samples if ("edge_device_cpu_percent", frozenset()) in samples else {}

    samples = eventually(sampled, timeout=60, interval=0.2,
                         message="the recorder never sampled the device")
    names = {name for name, _ in samples}
    assert {"edge_device_cpu_percent", "edge_device_memory_percent", "edge_agent_rss_bytes",
            "edge_disk_free_bytes"} <= names
    assert samples[("edge_agent_rss_bytes", frozenset())] > 0


SWAP_S = 0.2


def test_deployments_and_swap_duration_come_from_the_state_store(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path / "state")
    plane = DataPlane(tmp_path / "plane")
    try:
        store.upsert_version(VersionRecord("cam", 2, str(tmp_path), "0" * 64, 1))
        for kind, ok in ((DeploymentKind.DEPLOY, True), (DeploymentKind.DEPLOY, False),
                         (DeploymentKind.ROLLBACK, True)):
            dep = store.begin_deployment("cam", kind, to_version=2, from_version=1)
            store.record_step(dep, Step.RECEIVED, "")
            if kind is DeploymentKind.ROLLBACK:
                time.sleep(SWAP_S)  # the newest committed change takes at least SWAP_S
            if ok:
                store.commit_deployment(dep)
            else:
                store.fail_deployment(dep, "probe failed", failed_step=Step.PROBED)
        page = MetricsPage(AgentCollector(plane, history=store))
        samples = parse(page.render().decode())
        page.close()
    finally:
        plane.close()
        store.close()

    def labels(**kw: str) -> frozenset[tuple[str, str]]:
        return frozenset(kw.items())

    assert samples[("edge_deployments_total",
                    labels(model="cam", kind="deploy", status="committed"))] == 1
    assert samples[("edge_deployments_total",
                    labels(model="cam", kind="deploy", status="failed"))] == 1
    assert samples[("edge_deployments_total",
                    labels(model="cam", kind="rollback", status="committed"))] == 1
    assert samples[("edge_deployment_duration_seconds_count",
                    labels(model="cam", kind="rollback", status="committed"))] == 1
    # the gauge is the newest committed change (the rollback), not the first deploy
    rollback = labels(model="cam", kind="rollback", status="committed")
    swap = samples[("edge_last_swap_duration_seconds", labels(model="cam"))]
    assert swap >= SWAP_S
    assert swap == pytest.approx(samples[("edge_deployment_duration_seconds_sum", rollback)])
    assert not any(name.startswith("nv_cache") for name, _ in samples)  # cache off
